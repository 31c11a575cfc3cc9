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
// prefetch below), which are the rows of batched decode and of verify. The AVX-512 path lives in
// gemm_avx512.cpp; CPUs with AVX2 but no AVX-512
// get a second path below (same layout and arithmetic), which models/native_gemm.py gives every
// product of a layer where FBGEMM's rows depend on the row count.

#include <cstdint>

#if defined(__AVX512F__) && defined(__F16C__)
// the AVX-512 path is gemm_avx512.cpp (adaspec_pack_f16w below needs the intrinsics)
#include <immintrin.h>

#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
// AVX2 (8 lanes, 16 vector registers). The same packed layout and the same arithmetic per output
// element (one float32 FMA chain over k in order, from 0), so a row's bits never depend on the tile
// that computes it or on how many rows share the call. On these CPUs FBGEMM's own fp16-weight kernel
// changes its summation with the row count, so models/native_gemm.py gives this kernel every product
// of a layer whose bits differ from FBGEMM's: that is what keeps a verify row equal to a decode row.
//
// Accumulators are named variables, never arrays: with `__m256 acc[MR][4]` GCC 12 kept them in
// registers but also stored all twelve to the stack on every k, and the one store per cycle bound
// the loop (~43 GFLOPS at 3+ rows on a Zen 2 core whose FMA peak is ~90; 55-75 without the stores).
#include <immintrin.h>

namespace {

constexpr int PREFETCH = 16;  // k rows ahead in the panel being read
constexpr int64_t KC = 64;    // k rows per chunk of the 4+-row path (4 KiB of a panel: both halves from L1)
constexpr int64_t PREFETCH_NEXT = KC + 8;  // the chunk's last pass fetches the next chunk's first rows

inline __m256i lanes(int64_t n) {  // mask of the first n (<= 8) lanes
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline void store(float *y, __m256 v, int64_t n) {  // the first n columns of v (none if n <= 0)
    if (n >= 8) _mm256_storeu_ps(y, v);
    else if (n > 0) _mm256_maskstore_ps(y, lanes(n), v);
}

// 1-3 rows over a whole panel (4 accumulators per row; the rows' inputs broadcast first, one weight
// vector live at a time, so 3 rows fit the 16 registers): decode-sized products stream the panel once
template <int MR>
void tile_full(const float *x, int64_t ldx, const uint16_t *w, int64_t K, float *y, int64_t ldy, int64_t ncols) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
    __m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00;
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx;
    for (int64_t k = 0; k < K; k++) {
        const uint16_t *wp = w + k * 32;
        _mm_prefetch((const char *)(wp + PREFETCH * 32), _MM_HINT_T0);
        const __m256 a0 = _mm256_broadcast_ss(x0 + k);
        __m256 a1, a2;
        if constexpr (MR > 1) a1 = _mm256_broadcast_ss(x1 + k);
        if constexpr (MR > 2) a2 = _mm256_broadcast_ss(x2 + k);
#define ADASPEC_COL(J)                                                                      \
        {                                                                                   \
            const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wp + 8 * J))); \
            c0##J = _mm256_fmadd_ps(a0, b, c0##J);                                          \
            if constexpr (MR > 1) c1##J = _mm256_fmadd_ps(a1, b, c1##J);                    \
            if constexpr (MR > 2) c2##J = _mm256_fmadd_ps(a2, b, c2##J);                    \
        }
        ADASPEC_COL(0) ADASPEC_COL(1) ADASPEC_COL(2) ADASPEC_COL(3)
#undef ADASPEC_COL
    }
    const __m256 acc[3][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23}};
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < 4; j++) store(y + i * ldy + 8 * j, acc[i][j], ncols - 8 * j);
}

// 3-6 rows over half a panel (16 columns) and one chunk of k: 12 accumulators, two weight vectors,
// one broadcast. `resume` continues each chain from the float32 partial sum the previous chunk
// stored in y (exact: the chain is the same FMAs in the same order); `ahead` is the prefetch distance.
template <int MR>
void tile_half(const float *x, int64_t ldx, const uint16_t *w, int64_t K, float *y, int64_t ldy, int64_t ncols,
               bool resume, int64_t ahead) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx, *x4 = x + 4 * ldx, *x5 = x + 5 * ldx;
    if (resume) {
        const __m256i m0 = lanes(ncols), m1 = lanes(ncols - 8);
#define ADASPEC_LOAD(I)                                        \
        if constexpr (MR > I) {                                \
            c##I##0 = _mm256_maskload_ps(y + I * ldy, m0);     \
            c##I##1 = _mm256_maskload_ps(y + I * ldy + 8, m1); \
        }
        ADASPEC_LOAD(0) ADASPEC_LOAD(1) ADASPEC_LOAD(2) ADASPEC_LOAD(3) ADASPEC_LOAD(4) ADASPEC_LOAD(5)
#undef ADASPEC_LOAD
    }
    for (int64_t k = 0; k < K; k++) {
        const uint16_t *wp = w + k * 32;
        _mm_prefetch((const char *)(wp + ahead * 32), _MM_HINT_T0);
        const __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wp));
        const __m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wp + 8)));
#define ADASPEC_ROW(I)                                      \
        if constexpr (MR > I) {                             \
            const __m256 a = _mm256_broadcast_ss(x##I + k); \
            c##I##0 = _mm256_fmadd_ps(a, b0, c##I##0);      \
            c##I##1 = _mm256_fmadd_ps(a, b1, c##I##1);      \
        }
        ADASPEC_ROW(0) ADASPEC_ROW(1) ADASPEC_ROW(2) ADASPEC_ROW(3) ADASPEC_ROW(4) ADASPEC_ROW(5)
#undef ADASPEC_ROW
    }
    const __m256 acc[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < 2; j++) store(y + i * ldy + 8 * j, acc[i][j], ncols - 8 * j);
}

// 4+ rows of one panel: for each chunk of KC k rows, each half panel, blocks of at most 6 rows (sizes
// within one of each other). The chunk's second half and later blocks read it from L1, and the last
// pass over a chunk prefetches the next one, so the weights keep streaming while the rows compute;
// one pass per half over the whole panel instead ran 4 rows at ~1.45x the time of one row with the
// weights coming from memory (~1.15x this way; BENCHMARKS.md, stop 38).
void panel_rows(const float *x, int64_t M, int64_t K, int64_t ldx, const uint16_t *wp, float *yp, int64_t ldy,
                int64_t nc) {
    const int64_t nb = (M + 5) / 6;
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kc = K - k0 < KC ? K - k0 : KC;
        for (int h = 0; h < 2 && 16 * h < nc; h++) {
            const int64_t hc = nc - 16 * h < 16 ? nc - 16 * h : 16;
            const bool last_half = h == 1 || nc <= 16;
            for (int64_t b = 0, r = 0; b < nb; b++) {
                const int64_t mr = M / nb + (b < M % nb ? 1 : 0);
                const float *xr = x + r * ldx + k0;
                float *yr = yp + r * ldy + 16 * h;
                const uint16_t *wh = wp + k0 * 32 + 16 * h;
                const int64_t ahead = last_half && b == nb - 1 ? PREFETCH_NEXT : PREFETCH;
                const bool resume = k0 > 0;
                switch (mr) {  // 3-6: M >= 4 rows in ceil(M / 6) blocks within one of each other
                    case 6: tile_half<6>(xr, ldx, wh, kc, yr, ldy, hc, resume, ahead); break;
                    case 5: tile_half<5>(xr, ldx, wh, kc, yr, ldy, hc, resume, ahead); break;
                    case 4: tile_half<4>(xr, ldx, wh, kc, yr, ldy, hc, resume, ahead); break;
                    default: tile_half<3>(xr, ldx, wh, kc, yr, ldy, hc, resume, ahead);
                }
                r += mr;
            }
        }
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
        if (M >= 4) {
            panel_rows(x, M, K, ldx, wp, yp, ldy, nc);
        } else if (M == 3) {
            tile_full<3>(x, ldx, wp, K, yp, ldy, nc);
        } else if (M == 2) {
            tile_full<2>(x, ldx, wp, K, yp, ldy, nc);
        } else if (M == 1) {
            tile_full<1>(x, ldx, wp, K, yp, ldy, nc);
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
