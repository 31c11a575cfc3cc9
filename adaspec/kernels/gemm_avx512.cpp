// The fp16w products' AVX-512 path (y = x W^T, W float16, everything else float32; gemm.cpp holds the
// layout, the packing and the other paths). Every output element is one float32 FMA chain over
// k = 0 .. K-1 in order, starting from 0 -- FBGEMM's arithmetic, so models/native_gemm.py can check
// bit equality at load -- and no tiling below touches a sum's order, so a row's bits never depend on
// how many rows share the call.
//
// Why it is shaped this way (stop 58, a Zen 4 VM: all 121 products of the bundled model, one thread,
// BENCHMARKS.md "Stop 58"): the weights stream from memory at ~22 GB/s and the FMAs peak at ~95
// GFLOPS, so at 2-6 rows a product should cost about what one row costs. With one prefetch 16 k-rows
// (1 KiB) ahead into L1 it cost 1.07x (2 rows) to 1.67x (6 rows) of FBGEMM's one row: the stream
// stalled while the FMAs ran. A second prefetch far ahead into L2 (FAR k-rows, 8-12 KiB) keeps
// enough lines in flight, the near one brings them to L1: 2-3 rows got 10-17% faster. From 4 rows,
// two panels at once (4 accumulators per row, two streams) gained another 6-9%; at 2 rows it lost
// 15%, so 1-3 rows keep one panel.

#include <cstdint>

#if defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>

namespace {

constexpr int NEAR = 32;       // k rows ahead into L1 (2 KiB of a panel)
constexpr int FAR_ONE = 192;   // k rows ahead into L2, one panel at a time (12 KiB)
constexpr int FAR_TWO = 128;   // the same with two panels streaming (8 KiB each)
constexpr int MAX_BLOCK = 8;   // rows per two-panel block: 32 accumulators, spilling a little, measured fastest at 8

inline __mmask16 cols(int64_t c, int64_t ncols) {
    return c + 16 <= ncols ? (__mmask16)0xffff : (c >= ncols ? (__mmask16)0 : (__mmask16)((1u << (ncols - c)) - 1));
}

inline void prefetch(const uint16_t *wp, int far) {
    _mm_prefetch((const char *)(wp + far * 32), _MM_HINT_T1);
    _mm_prefetch((const char *)(wp + NEAR * 32), _MM_HINT_T0);
}

inline __m512 half(const uint16_t *wp) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)wp)); }

// MR rows x one panel (32 columns); w points at the panel, ncols = its columns to store (<= 32)
template <int MR>
void tile(const float *x, int64_t ldx, const uint16_t *w, int64_t K, float *y, int64_t ldy, int64_t ncols) {
    __m512 acc[MR][2];
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const uint16_t *wp = w + k * 32;
        if constexpr (MR > 1) prefetch(wp, FAR_ONE);  // one row streams fastest on the hardware prefetcher alone
        const __m512 b0 = half(wp), b1 = half(wp + 16);
        for (int i = 0; i < MR; i++) {
            const __m512 a = _mm512_set1_ps(x[i * ldx + k]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < 2; j++) _mm512_mask_storeu_ps(y + i * ldy + 16 * j, cols(16 * j, ncols), acc[i][j]);
}

// MR rows x two panels (w0 full, w1 with ncols1 columns to store), y0 / y1 their first output columns
template <int MR>
void tile2(const float *x, int64_t ldx, const uint16_t *w0, const uint16_t *w1, int64_t K, float *y0, float *y1,
           int64_t ldy, int64_t ncols1) {
    __m512 acc[MR][4];
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const uint16_t *wp = w0 + k * 32, *wq = w1 + k * 32;
        prefetch(wp, FAR_TWO);
        prefetch(wq, FAR_TWO);
        const __m512 b0 = half(wp), b1 = half(wp + 16), b2 = half(wq), b3 = half(wq + 16);
        for (int i = 0; i < MR; i++) {
            const __m512 a = _mm512_set1_ps(x[i * ldx + k]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
            acc[i][2] = _mm512_fmadd_ps(a, b2, acc[i][2]);
            acc[i][3] = _mm512_fmadd_ps(a, b3, acc[i][3]);
        }
    }
    for (int i = 0; i < MR; i++) {
        _mm512_storeu_ps(y0 + i * ldy, acc[i][0]);
        _mm512_storeu_ps(y0 + i * ldy + 16, acc[i][1]);
        for (int j = 0; j < 2; j++) _mm512_mask_storeu_ps(y1 + i * ldy + 16 * j, cols(16 * j, ncols1), acc[i][2 + j]);
    }
}

#define ADASPEC_ROWS(F) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8)

void one_panel(int mr, const float *x, int64_t ldx, const uint16_t *w, int64_t K, float *y, int64_t ldy, int64_t nc) {
    switch (mr) {
#define ADASPEC_CASE(R) case R: tile<R>(x, ldx, w, K, y, ldy, nc); break;
        ADASPEC_ROWS(ADASPEC_CASE)
#undef ADASPEC_CASE
    }
}

void two_panels(int mr, const float *x, int64_t ldx, const uint16_t *w0, const uint16_t *w1, int64_t K, float *y0,
                float *y1, int64_t ldy, int64_t nc1) {
    switch (mr) {
#define ADASPEC_CASE(R) case R: tile2<R>(x, ldx, w0, w1, K, y0, y1, ldy, nc1); break;
        ADASPEC_ROWS(ADASPEC_CASE)
#undef ADASPEC_CASE
    }
}

}  // namespace

extern "C" {

int adaspec_gemm_f16w_available(void) { return 1; }

// x [M, K] (row stride ldx), packed w (gemm.cpp), y [M, N] (row stride ldy). Rows go in blocks of at most
// MAX_BLOCK, sizes within one of each other; a block reads a pair of panels (the second block of a pair
// finds it in L2), or one panel for 1-3 rows and for an odd last panel.
int adaspec_gemm_f16w(const float *x, int64_t M, int64_t K, int64_t ldx, const uint16_t *w, int64_t N, float *y,
                      int64_t ldy) {
    if (M < 0 || N <= 0 || K <= 0 || ldx < K || ldy < N) return -1;
    if (M == 0) return 0;
    const int64_t P = (N + 31) / 32, nb = (M + MAX_BLOCK - 1) / MAX_BLOCK;
    const bool pairs = M >= 4;
    for (int64_t p = 0; p < P; p += pairs && p + 1 < P ? 2 : 1) {
        const bool pair = pairs && p + 1 < P;
        const int64_t nc = N - p * 32 < 32 ? N - p * 32 : 32, nc1 = pair ? (N - (p + 1) * 32 < 32 ? N - (p + 1) * 32 : 32) : 0;
        for (int64_t b = 0, r = 0; b < nb; b++) {
            const int mr = (int)(M / nb + (b < M % nb ? 1 : 0));
            const float *xr = x + r * ldx;
            float *yr = y + r * ldy + p * 32;
            if (pair)
                two_panels(mr, xr, ldx, w + p * K * 32, w + (p + 1) * K * 32, K, yr, yr + 32, ldy, nc1);
            else
                one_panel(mr, xr, ldx, w + p * K * 32, K, yr, ldy, nc);
            r += mr;
        }
    }
    return 0;
}

}  // extern "C"

#endif
