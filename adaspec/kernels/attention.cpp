// Ragged attention over adaspec's position-indexed KV cache, for float32 on CPU (issue 14).
//
// Built once per machine by adaspec/kernels/build.py (the system C++ compiler, -O3 -march=native,
// no fast-math) and called through ctypes from adaspec/models/native_kernels.py.
//
// One call does what models/attention.py's SDPA path and models/rope.apply_rotary do for one layer:
// it rotates the new rows' queries and keys, writes the keys and values into the cache at their
// positions, then every query row attends to the keys [lo, hi) of its request's slot. Two
// properties matter more than speed:
//
// * A row's result is a function of that row alone (its query and the keys and values it sees),
//   never of how many rows share the call, which requests sit beside it, or how a prompt was cut
//   into chunks: every sum below runs in an order fixed by the row's own key range, and a key's
//   score never mixes with another key's. So a verify row has the bits of the plain decode row,
//   which greedy and seeded exactness (R-B5) rely on, without padding anything.
// * It reads each key and value once per block of RB rows. Decode attention is memory-bound: at
//   batch 8 torch's SDPA ran at about a third of this core's bandwidth on the 4-row query blocks
//   that grouped-query decode gives it (BENCHMARKS.md, "Native layer kernels, and issue 14
//   re-measured"); this kernel runs at about the time a plain read of those bytes takes.
//
// Vectors and helpers: simd.h.

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "simd.h"

namespace {

using namespace adaspec;

constexpr int RB = 4;  // query rows that share each key/value load
constexpr int MAX_D = 256;  // head_dim limit (multiple of W)

#if ADASPEC_W == 16
// Lane k of the result = the sum of the lanes of a[k], by one fixed tree (keys never mix).
inline vf reduce(const vf *a) {
    vf c[8], d[4], e[2];
    for (int k = 0; k < 8; k++)
        c[k] = __builtin_shufflevector(a[k], a[k + 8], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
             + __builtin_shufflevector(a[k], a[k + 8], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    for (int k = 0; k < 4; k++)
        d[k] = __builtin_shufflevector(c[k], c[k + 4], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27)
             + __builtin_shufflevector(c[k], c[k + 4], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    for (int k = 0; k < 2; k++)
        e[k] = __builtin_shufflevector(d[k], d[k + 2], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29)
             + __builtin_shufflevector(d[k], d[k + 2], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    return __builtin_shufflevector(e[0], e[1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30)
         + __builtin_shufflevector(e[0], e[1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
}

#else
// Lane k of the result = the sum of the lanes of a[k] (8 lanes), by one fixed tree (keys never mix).
inline vf reduce(const vf *a) {
    vf c[4], d[2];
    for (int k = 0; k < 4; k++)
        c[k] = __builtin_shufflevector(a[k], a[k + 4], 0, 1, 2, 3, 8, 9, 10, 11)
             + __builtin_shufflevector(a[k], a[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    for (int k = 0; k < 2; k++)
        d[k] = __builtin_shufflevector(c[k], c[k + 2], 0, 1, 8, 9, 4, 5, 12, 13)
             + __builtin_shufflevector(c[k], c[k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    return __builtin_shufflevector(d[0], d[1], 0, 8, 2, 10, 4, 12, 6, 14)
         + __builtin_shufflevector(d[0], d[1], 1, 9, 3, 11, 5, 13, 7, 15);
}
#endif

// Rotary embedding of one head's row as models/rope.apply_rotary computes it: x * cos + rotate_half(x)
// * sin, rotate_half(x) = [-x[D/2:], x[:D/2]] (cos and sin already carry the attention factor).
inline void rotate(const float *x, const float *cos, const float *sin, int D, float *out) {
    const int half = D / 2;
    for (int j = 0; j < half; j++) out[j] = x[j] * cos[j] - x[j + half] * sin[j];
    for (int j = half; j < D; j++) out[j] = x[j] * cos[j] + x[j - half] * sin[j];
}

#if ADASPEC_W != 16
// Columns d .. d+NC-1 (vectors of W) of the values for NR (<= RB) rows: each output element sums
// over the keys in ascending order, as the 16-lane path does, with the accumulators in named
// registers (all of a head's columns at once would need 32 AVX2 registers for 4 rows).
template <int NR, int NC>
inline void value_columns(const float *V, int64_t pos_stride, int32_t jlo, int32_t jhi, const float *sc,
                          int64_t span, int d, float *const *outs, const float *inv) {
    vf a00 = vf{}, a01 = vf{}, a10 = vf{}, a11 = vf{}, a20 = vf{}, a21 = vf{}, a30 = vf{}, a31 = vf{};
    const float *s0 = sc, *s1 = sc + span, *s2 = sc + 2 * span, *s3 = sc + 3 * span;
    for (int32_t j = jlo; j < jhi; j++) {
        const float *vj = V + (int64_t)j * pos_stride + d * W;
        const vf v0 = load(vj);
        vf v1;
        if constexpr (NC > 1) v1 = load(vj + W);
#define ADASPEC_ROW(I)                                 \
        if constexpr (NR > I) {                        \
            const float p = s##I[j];                   \
            a##I##0 += p * v0;                         \
            if constexpr (NC > 1) a##I##1 += p * v1;   \
        }
        ADASPEC_ROW(0) ADASPEC_ROW(1) ADASPEC_ROW(2) ADASPEC_ROW(3)
#undef ADASPEC_ROW
    }
    const vf acc[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
    for (int i = 0; i < NR; i++)
        for (int c = 0; c < NC; c++) store(outs[i] + (d + c) * W, acc[i][c] * inv[i]);
}

template <int NC>
inline void value_rows(int nr, const float *V, int64_t pos_stride, int32_t jlo, int32_t jhi, const float *sc,
                       int64_t span, int d, float *const *outs, const float *inv) {
    switch (nr) {
    case 4: value_columns<4, NC>(V, pos_stride, jlo, jhi, sc, span, d, outs, inv); break;
    case 3: value_columns<3, NC>(V, pos_stride, jlo, jhi, sc, span, d, outs, inv); break;
    case 2: value_columns<2, NC>(V, pos_stride, jlo, jhi, sc, span, d, outs, inv); break;
    default: value_columns<1, NC>(V, pos_stride, jlo, jhi, sc, span, d, outs, inv);
    }
}
#endif

// Rows r0..r0+nr-1 of one (request, KV head): `qs[i]` their queries, [lo[i], hi[i]) their keys.
// ND = head_dim / W when it is one of the sizes compiled in (fully unrolled), else 0 (runtime nd).
template <int ND>
void attend_block(const float *const *qs, const int32_t *lo, const int32_t *hi, int nr,
                  const float *K, const float *V, int64_t pos_stride, int nd_runtime, float scale,
                  float *sc, int64_t span, float *const *outs) {
    const int nd = ND ? ND : nd_runtime;
    int32_t jlo = lo[0], jhi = hi[0];
    for (int i = 1; i < nr; i++) {
        jlo = lo[i] < jlo ? lo[i] : jlo;
        jhi = hi[i] > jhi ? hi[i] : jhi;
    }
    const int32_t g0 = jlo / W * W, g1 = (jhi + W - 1) / W * W;
    vf q[RB][MAX_D / W];
    for (int i = 0; i < nr; i++)
        for (int d = 0; d < nd; d++) q[i][d] = load(qs[i] + d * W);
    // scores: each key's dot product runs over D in a fixed order; W keys are reduced together by
    // reduce16, whose lanes never mix, so a score does not depend on its neighbours either
    for (int32_t j = g0; j < g1; j += W) {
        vf a[RB][W];
        bool live[RB];
        for (int i = 0; i < nr; i++) live[i] = j < hi[i] && j + W > lo[i];
        for (int k = 0; k < W; k++) {
            const float *kj = K + (int64_t)(j + k) * pos_stride;
            vf kv[MAX_D / W];
            for (int d = 0; d < nd; d++) kv[d] = load(kj + d * W);
            for (int i = 0; i < nr; i++) {
                if (!live[i]) continue;
                vf acc = q[i][0] * kv[0];
                for (int d = 1; d < nd; d++) acc += q[i][d] * kv[d];
                a[i][k] = acc;
            }
        }
        for (int i = 0; i < nr; i++)
            if (live[i]) store(sc + i * span + j, reduce(a[i]) * scale);
    }
    // softmax per row over its own keys; the lanes of the sum are fixed by the absolute key index,
    // and keys outside the row's range are exact zeros (x + 0 == x)
    float inv[RB];
    vi lane;
    for (int l = 0; l < W; l++) lane[l] = l;
    for (int i = 0; i < nr; i++) {
        float *s = sc + i * span;
        float m = -INFINITY;
        for (int32_t j = lo[i]; j < hi[i]; j++) m = s[j] > m ? s[j] : m;
        vf sum = vf{};
        for (int32_t j = g0; j < g1; j += W) {
            if (j >= hi[i] || j + W <= lo[i]) {
                store(s + j, vf{});
                continue;
            }
            vi idx = lane + j;
            vi in = (idx >= lo[i]) & (idx < hi[i]);
            vf e = vexp(load(s + j) - m);
            vi eb;
            std::memcpy(&eb, &e, sizeof eb);
            eb &= in;
            std::memcpy(&e, &eb, sizeof e);
            sum += e;
            store(s + j, e);
        }
        inv[i] = 1.0f / hsum(sum);
    }
    // values: every row accumulates over the block's key range in ascending order; the keys outside
    // its own range have weight exactly 0 and leave its sums unchanged
#if ADASPEC_W == 16
    vf acc[RB][MAX_D / W];
    for (int i = 0; i < nr; i++)
        for (int d = 0; d < nd; d++) acc[i][d] = vf{};
    for (int32_t j = jlo; j < jhi; j++) {
        const float *vj = V + (int64_t)j * pos_stride;
        vf vv[MAX_D / W];
        for (int d = 0; d < nd; d++) vv[d] = load(vj + d * W);
        for (int i = 0; i < nr; i++) {
            const float p = sc[i * span + j];
            for (int d = 0; d < nd; d++) acc[i][d] += p * vv[d];
        }
    }
    for (int i = 0; i < nr; i++)
        for (int d = 0; d < nd; d++) store(outs[i] + d * W, acc[i][d] * inv[i]);
#else
    int d = 0;
    for (; d + 1 < nd; d += 2) value_rows<2>(nr, V, pos_stride, jlo, jhi, sc, span, d, outs, inv);
    if (d < nd) value_rows<1>(nr, V, pos_stride, jlo, jhi, sc, span, d, outs, inv);
#endif
}

}  // namespace

extern "C" {

int adaspec_kernel_abi(void) { return 4; }  // kernels/build.py ABI

// Returns 0, or a negative code: -1 bad sizes, -2 a slot or key range outside the cache, -3 no memory.
//
// q [T, H, D] (row stride q_rs, head stride q_hs, D contiguous); k, v [T, KVH, D] likewise; out
// [T, H, D] contiguous. With `cos` and `sin` ([T, D] contiguous) q and k are rotated first (rotary
// embedding; k before it is written), else they are used as they are. Request b owns rows
// req_off[b] .. req_off[b+1]-1 and cache slot req_slot[b] (of c_slots); row t is written at position
// row_pos[t] and attends to keys [row_lo[t], row_hi[t]). Query head h reads KV head h / (H / KVH).
// The cache length must be a multiple of W (keys are scored in whole groups of W; those past a
// row's range are discarded, never mixed in).
int adaspec_ragged_attention_f32(
    const float *q, int64_t q_rs, int64_t q_hs,
    const float *k, int64_t k_rs, int64_t k_hs,
    const float *v, int64_t v_rs, int64_t v_hs,
    float *kc, float *vc, int64_t c_ss, int64_t c_hs, int64_t c_ps, int64_t c_len, int64_t c_slots,
    const int64_t *req_slot, const int32_t *req_off, int32_t B,
    const int32_t *row_pos, const int32_t *row_lo, const int32_t *row_hi,
    const float *cos, const float *sin,
    float *out, int32_t H, int32_t KVH, int32_t D, float scale) {
    if (D % W || D > MAX_D || D <= 0 || KVH <= 0 || H % KVH || c_len % W) return -1;
    const int nd = D / W, G = H / KVH;
    const int32_t T = req_off[B];
    for (int32_t b = 0; b < B; b++)
        if (req_slot[b] < 0 || req_slot[b] >= c_slots || req_off[b + 1] < req_off[b]) return -2;
    int32_t maxhi = 0;
    for (int32_t t = 0; t < T; t++) {
        if (row_lo[t] < 0 || row_hi[t] <= row_lo[t] || row_hi[t] > c_len || row_pos[t] < 0 || row_pos[t] >= c_len)
            return -2;
        maxhi = row_hi[t] > maxhi ? row_hi[t] : maxhi;
    }
    // 1. the new keys and values, at their positions
    for (int32_t b = 0; b < B; b++)
        for (int32_t t = req_off[b]; t < req_off[b + 1]; t++)
            for (int32_t h = 0; h < KVH; h++) {
                const int64_t at = req_slot[b] * c_ss + h * c_hs + (int64_t)row_pos[t] * c_ps;
                if (cos != nullptr)
                    rotate(k + t * k_rs + h * k_hs, cos + (int64_t)t * D, sin + (int64_t)t * D, D, kc + at);
                else
                    std::memcpy(kc + at, k + t * k_rs + h * k_hs, sizeof(float) * D);
                std::memcpy(vc + at, v + t * v_rs + h * v_hs, sizeof(float) * D);
            }
    // 2. attention, RB rows at a time: the query heads of one KV head for consecutive rows
    const int64_t span = (maxhi + W - 1) / W * W;
    float *sc = static_cast<float *>(std::malloc(sizeof(float) * RB * span + 64));
    if (!sc) return -3;
    for (int32_t b = 0; b < B; b++) {
        const int32_t t0 = req_off[b], nrows = (req_off[b + 1] - t0) * G;
        for (int32_t h = 0; h < KVH; h++) {
            const float *K = kc + req_slot[b] * c_ss + h * c_hs;
            const float *V = vc + req_slot[b] * c_ss + h * c_hs;
            for (int32_t r0 = 0; r0 < nrows; r0 += RB) {
                const int nr = nrows - r0 < RB ? nrows - r0 : RB;
                const float *qs[RB];
                float *outs[RB];
                alignas(64) float rotated[RB][MAX_D];
                int32_t lo[RB], hi[RB];
                for (int i = 0; i < nr; i++) {
                    const int32_t t = t0 + (r0 + i) / G, head = h * G + (r0 + i) % G;
                    qs[i] = q + t * q_rs + head * q_hs;
                    if (cos != nullptr) {
                        rotate(qs[i], cos + (int64_t)t * D, sin + (int64_t)t * D, D, rotated[i]);
                        qs[i] = rotated[i];
                    }
                    outs[i] = out + ((int64_t)t * H + head) * D;
                    lo[i] = row_lo[t];
                    hi[i] = row_hi[t];
                }
                switch (nd) {
                case 2: attend_block<2>(qs, lo, hi, nr, K, V, c_ps, nd, scale, sc, span, outs); break;
                case 4: attend_block<4>(qs, lo, hi, nr, K, V, c_ps, nd, scale, sc, span, outs); break;
                case 8: attend_block<8>(qs, lo, hi, nr, K, V, c_ps, nd, scale, sc, span, outs); break;
#if ADASPEC_W != 16
                case 16: attend_block<16>(qs, lo, hi, nr, K, V, c_ps, nd, scale, sc, span, outs); break;  // head 128
#endif
                default: attend_block<0>(qs, lo, hi, nr, K, V, c_ps, nd, scale, sc, span, outs);
                }
            }
        }
    }
    std::free(sc);
    return 0;
}

}  // extern "C"
