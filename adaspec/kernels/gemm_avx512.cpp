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

// MR rows x NP panels of 32 columns (NP = 1 or 2): w[p] points at panel p, y[p] at its first output column; every
// panel but the last is full, the last stores `ncols` columns (<= 32). One row streams fastest on the hardware
// prefetcher alone; otherwise each panel is prefetched FAR_ONE / FAR_TWO rows ahead into L2 and NEAR into L1.
template <int MR, int NP>
void tile(const float *x, int64_t ldx, const uint16_t *const *w, int64_t K, float *const *y, int64_t ldy,
          int64_t ncols) {
    __m512 acc[MR][2 * NP];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < 2 * NP; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        __m512 b[2 * NP];
        for (int p = 0; p < NP; p++) {
            const uint16_t *wp = w[p] + k * 32;
            if constexpr (MR > 1 || NP > 1) prefetch(wp, NP == 1 ? FAR_ONE : FAR_TWO);
            b[2 * p] = half(wp);
            b[2 * p + 1] = half(wp + 16);
        }
        for (int i = 0; i < MR; i++) {
            const __m512 a = _mm512_set1_ps(x[i * ldx + k]);
            for (int j = 0; j < 2 * NP; j++) acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < NP; p++)
            for (int j = 0; j < 2; j++) {
                const __mmask16 m = cols(16 * j, p + 1 < NP ? 32 : ncols);
                _mm512_mask_storeu_ps(y[p] + i * ldy + 16 * j, m, acc[i][2 * p + j]);
            }
}

// `mr` (1..8) rows over `np` (1 or 2) panels, as tile<MR, NP>
void rows(int mr, int np, const float *x, int64_t ldx, const uint16_t *const *w, int64_t K, float *const *y,
          int64_t ldy, int64_t ncols) {
    switch (mr * 2 + np - 1) {
#define ADASPEC_CASE(R) \
        case 2 * R: tile<R, 1>(x, ldx, w, K, y, ldy, ncols); break; \
        case 2 * R + 1: tile<R, 2>(x, ldx, w, K, y, ldy, ncols); break;
        ADASPEC_CASE(1) ADASPEC_CASE(2) ADASPEC_CASE(3) ADASPEC_CASE(4)
        ADASPEC_CASE(5) ADASPEC_CASE(6) ADASPEC_CASE(7) ADASPEC_CASE(8)
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
    for (int64_t p = 0; p < P;) {
        const int np = pairs && p + 1 < P ? 2 : 1;
        const int64_t last = p + np - 1, nc = N - last * 32 < 32 ? N - last * 32 : 32;
        const uint16_t *w_p[2] = {w + p * K * 32, w + last * K * 32};
        for (int64_t b = 0, r = 0; b < nb; b++) {
            const int mr = (int)(M / nb + (b < M % nb ? 1 : 0));
            float *y_p[2] = {y + r * ldy + p * 32, y + r * ldy + last * 32};
            rows(mr, np, x + r * ldx, ldx, w_p, K, y_p, ldy, nc);
            r += mr;
        }
        p += np;
    }
    return 0;
}

}  // extern "C"

#endif
