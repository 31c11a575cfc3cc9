// Row-wise and element-wise pieces of a decoder layer, fused, for float32 on CPU (issue 14).
//
// In a decode step of a small model these ops cost more in Python and dispatch than in arithmetic
// (BENCHMARKS.md, "Native layer kernels, and issue 14 re-measured"): torch's RMSNorm is eight ops
// per call, SiLU-and-multiply three. Each function here is one call and one pass over the data.
// Every row is computed alone, in an order fixed by the source (no fast-math), so its bits never
// depend on how many rows share the call.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "simd.h"

using namespace adaspec;

extern "C" {

// For each of the T rows of x [T, H] (row stride x_rs): when `add` is not null, x_row + add_row is
// written into `sum` [T, H] (contiguous; may be `add` itself); then out = weight * (s / rms(s)),
// s the (summed) row, rms = sqrt(mean(s^2) + eps). Any H: whole vectors, then the tail in order.
int adaspec_add_rmsnorm_f32(const float *x, int64_t x_rs, const float *add, float *sum, const float *weight,
                            float *out, int32_t T, int32_t H, float eps) {
    if (H <= 0) return -1;
    const int32_t body = H / W * W;
    for (int32_t t = 0; t < T; t++) {
        const float *xr = x + t * x_rs;
        const float *s = xr;
        if (add != nullptr) {
            const float *ar = add + (int64_t)t * H;
            float *sr = sum + (int64_t)t * H;
            for (int32_t i = 0; i < body; i += W) store(sr + i, load(xr + i) + load(ar + i));
            for (int32_t i = body; i < H; i++) sr[i] = xr[i] + ar[i];
            s = sr;
        }
        vf acc = vf{};
        for (int32_t i = 0; i < body; i += W) {
            vf v = load(s + i);
            acc += v * v;
        }
        float ss = hsum(acc);
        for (int32_t i = body; i < H; i++) ss += s[i] * s[i];
        const float r = 1.0f / std::sqrt(ss / (float)H + eps);
        float *o = out + (int64_t)t * H;
        for (int32_t i = 0; i < body; i += W) store(o + i, load(weight + i) * (load(s + i) * r));
        for (int32_t i = body; i < H; i++) o[i] = weight[i] * (s[i] * r);
    }
    return 0;
}

// out [T, F] = silu(g) * u, g = gu[t, 0:F], u = gu[t, F:2F] (gu [T, 2F] contiguous). Any F: a
// tail shorter than a vector goes through a zero-padded vector, so every element takes one path.
int adaspec_silu_mul_f32(const float *gu, float *out, int32_t T, int32_t F) {
    if (F <= 0) return -1;
    const int32_t body = F / W * W;
    for (int32_t t = 0; t < T; t++) {
        const float *g = gu + (int64_t)t * 2 * F, *u = g + F;
        float *o = out + (int64_t)t * F;
        for (int32_t i = 0; i < body; i += W) {
            vf x = load(g + i);
            store(o + i, x / (1.0f + vexp(-x)) * load(u + i));
        }
        if (body < F) {
            float xs[W] = {}, us[W] = {}, os[W];
            std::memcpy(xs, g + body, sizeof(float) * (F - body));
            std::memcpy(us, u + body, sizeof(float) * (F - body));
            vf x = load(xs);
            store(os, x / (1.0f + vexp(-x)) * load(us));
            std::memcpy(o + body, os, sizeof(float) * (F - body));
        }
    }
    return 0;
}

}  // extern "C"
