// y = x W^T with W held as float16 and everything else float32: the fp16w linear backend's
// products at verify-sized row counts (issue 14). Built with the other layer kernels by
// adaspec/kernels/build.py and called from adaspec/models/native_gemm.py.
//
// Every output element is one float32 FMA chain over k = 0 .. K-1 in order, starting from 0: the
// same arithmetic FBGEMM's fp16-weight kernel does, so at load native_gemm.py checks that both
// give identical bits on this machine before it uses this one, and rows never depend on how many
// rows share the call (tiling over rows and columns does not touch a sum's order).
//
// Layout of the packed weight: panels of 32 output columns (the last one zero-padded); panel p
// holds K rows of its 32 columns' float16 values, 64 bytes each, so a panel is one sequential
// stream. Why a kernel of our own: FBGEMM's fp16 kernel runs at ~100 GFLOPS from about 32 rows
// up, but streams the weights poorly at 4-16 rows (82 GFLOPS at 8 rows against ~94 here, with the
// prefetch below), which are the rows of batched decode and of verify. CPUs with AVX2 but no AVX-512
// get a second path below (same layout and arithmetic), which models/native_gemm.py gives every
// product of a layer where FBGEMM's rows depend on the row count.

#include <cstdint>

#if defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>

namespace {

constexpr int PREFETCH = 16;  // k rows ahead (1 KiB of the panel); measured best of 0-128 here

inline __mmask16 cols(int64_t c, int64_t ncols) {
    return c + 16 <= ncols ? (__mmask16)0xffff : (c >= ncols ? (__mmask16)0 : (__mmask16)((1u << (ncols - c)) - 1));
}

// MR rows x one panel (32 columns); w points at the panel, ncols = columns to store (<= 32). One panel
// at a time at every row count: a variant that ran 1-4 rows over two panels at once (more
// independent FMA chains) was 3-7% slower than this at 1-4 rows on a Zen 5 VM, and slower than
// FBGEMM there (BENCHMARKS.md, "fp16w products in adaspec's kernel at 1-4 rows").
template <int MR>
void tile(const float *x, int64_t ldx, const uint16_t *w, int64_t K, float *y, int64_t ldy, int64_t ncols) {
    __m512 acc[MR][2];
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const uint16_t *wp = w + k * 32;
        _mm_prefetch((const char *)(wp + PREFETCH * 32), _MM_HINT_T0);
        const __m512 b0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)wp));
        const __m512 b1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wp + 16)));
        for (int i = 0; i < MR; i++) {
            const __m512 a = _mm512_set1_ps(x[i * ldx + k]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < 2; j++) _mm512_mask_storeu_ps(y + i * ldy + 16 * j, cols(16 * j, ncols), acc[i][j]);
}

void tile_rows(int mr, const float *x, int64_t ldx, const uint16_t *w, int64_t K, float *y, int64_t ldy,
               int64_t ncols) {
    switch (mr) {
#define ROWS(R) case R: tile<R>(x, ldx, w, K, y, ldy, ncols); break;
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8) ROWS(9) ROWS(10) ROWS(11) ROWS(12)
#undef ROWS
    }
}

}  // namespace

extern "C" {

int adaspec_gemm_f16w_available(void) { return 1; }

// x [M, K] (row stride ldx), packed w as above, y [M, N] (row stride ldy)
int adaspec_gemm_f16w(const float *x, int64_t M, int64_t K, int64_t ldx, const uint16_t *w, int64_t N, float *y,
                      int64_t ldy) {
    if (M < 0 || N <= 0 || K <= 0 || ldx < K || ldy < N) return -1;
    const int64_t P = (N + 31) / 32;
    constexpr int MR = 12;
    for (int64_t p = 0; p < P; p++) {
        const int64_t nc = N - p * 32 < 32 ? N - p * 32 : 32;
        for (int64_t m = 0; m < M; m += MR) {
            const int mr = M - m < MR ? (int)(M - m) : MR;
            tile_rows(mr, x + m * ldx, ldx, w + p * K * 32, K, y + m * ldy + p * 32, ldy, nc);
        }
    }
    return 0;
}

}  // extern "C"

#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
// AVX2 (8 lanes, 16 vector registers). The same packed layout and the same arithmetic per output
// element (one float32 FMA chain over k in order, from 0), so a row's bits never depend on the tile
// that computes it or on how many rows share the call. On these CPUs FBGEMM's own fp16-weight kernel
// changes its summation with the row count, so models/native_gemm.py gives this kernel every product
// of a layer whose bits differ from FBGEMM's: that is what keeps a verify row equal to a decode row.
#include <immintrin.h>

namespace {

constexpr int PREFETCH = 16;

// 1-3 rows over a whole panel (4 accumulators per row; the rows' inputs broadcast first, one weight
// vector live at a time, so 3 rows fit the 16 registers): decode-sized products stream the panel once
template <int MR>
void tile_full(const float *x, int64_t ldx, const uint16_t *w, int64_t K, float *y, int64_t ldy, int64_t ncols) {
    __m256 acc[MR][4];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const uint16_t *wp = w + k * 32;
        _mm_prefetch((const char *)(wp + PREFETCH * 32), _MM_HINT_T0);
        __m256 a[MR];
        for (int i = 0; i < MR; i++) a[i] = _mm256_broadcast_ss(x + i * ldx + k);
        for (int j = 0; j < 4; j++) {
            const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wp + 8 * j)));
            for (int i = 0; i < MR; i++) acc[i][j] = _mm256_fmadd_ps(a[i], b, acc[i][j]);
        }
    }
    alignas(32) float tmp[32];
    for (int i = 0; i < MR; i++) {
        for (int j = 0; j < 4; j++) _mm256_store_ps(tmp + 8 * j, acc[i][j]);
        for (int c = 0; c < ncols; c++) y[i * ldy + c] = tmp[c];
    }
}

}  // namespace

extern "C" {

int adaspec_gemm_f16w_available(void) { return 2; }  // 2: the AVX2 kernel

int adaspec_gemm_f16w(const float *x, int64_t M, int64_t K, int64_t ldx, const uint16_t *w, int64_t N, float *y,
                      int64_t ldy) {
    if (M < 0 || N <= 0 || K <= 0 || ldx < K || ldy < N) return -1;
    const int64_t P = (N + 31) / 32;
    for (int64_t p = 0; p < P; p++) {
        const int64_t nc = N - p * 32 < 32 ? N - p * 32 : 32;
        const uint16_t *wp = w + p * K * 32;
        float *yp = y + p * 32;
        // blocks of 3 rows over the whole panel (from L2 after the first block); widening the panel to
        // float32 once and running 6-row blocks over 16-column halves was slower here at 4-192 rows
        for (int64_t m = 0; m < M; m += 3) {
            const int64_t mr = M - m < 3 ? M - m : 3;
            if (mr == 3) tile_full<3>(x + m * ldx, ldx, wp, K, yp + m * ldy, ldy, nc);
            else if (mr == 2) tile_full<2>(x + m * ldx, ldx, wp, K, yp + m * ldy, ldy, nc);
            else tile_full<1>(x + m * ldx, ldx, wp, K, yp + m * ldy, ldy, nc);
        }
    }
    return 0;
}

}  // extern "C"

#else  // neither AVX-512 nor AVX2 with F16C and FMA: the fp16w backend keeps FBGEMM's kernel at every row count

extern "C" {
int adaspec_gemm_f16w_available(void) { return 0; }
int adaspec_pack_f16w(const float *, int64_t, int64_t, uint16_t *) { return -4; }
int adaspec_gemm_f16w(const float *, int64_t, int64_t, int64_t, const uint16_t *, int64_t, float *, int64_t) {
    return -4;
}
}  // extern "C"

#endif

#if (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))) && defined(__F16C__)
extern "C" {

// w [N, K] float32 (row-major) -> packed [ceil(N / 32), K, 32] float16, round to nearest even (both paths)
int adaspec_pack_f16w(const float *w, int64_t N, int64_t K, uint16_t *out) {
    if (N <= 0 || K <= 0) return -1;
    const int64_t P = (N + 31) / 32;
    for (int64_t p = 0; p < P; p++)
        for (int64_t k = 0; k < K; k++)
            for (int j = 0; j < 32; j++) {
                const int64_t n = p * 32 + j;
                out[(p * K + k) * 32 + j] = _cvtss_sh(n < N ? w[n * K + k] : 0.0f, _MM_FROUND_TO_NEAREST_INT);
            }
    return 0;
}

}  // extern "C"
#endif
