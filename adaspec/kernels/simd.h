// Vectors of W floats for adaspec's kernels (GCC/Clang vector extensions: AVX-512, AVX2 or NEON,
// whatever the compiler targets), and the few helpers both kernel files use. Every function here
// computes each lane alone or in a fixed order, so results never depend on neighbouring data.
#pragma once

#include <cstdint>
#include <cstring>

namespace adaspec {

#if defined(__AVX2__) && !defined(__AVX512F__)
// One AVX2 register. GCC lowers 16-float vectors badly there (pieces moved through general registers
// and the stack on every operation: one layer's attention ran 2.4-5.9x slower than with 8 floats).
#define ADASPEC_W 8
#else
#define ADASPEC_W 16
#endif
constexpr int W = ADASPEC_W;  // lanes per vector
typedef float vf __attribute__((vector_size(W * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(W * sizeof(int32_t))));

inline vf load(const float *p) { vf v; std::memcpy(&v, p, sizeof v); return v; }
inline void store(float *p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{} + x; }

inline float hsum(vf v) {  // the lanes' sum by one fixed tree
    float a[W];
    std::memcpy(a, &v, sizeof a);
    for (int w = W / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) a[i] += a[i + w];
    return a[0];
}

// exp(x) lane by lane: Cephes' expf polynomial, within ~2 ulp of std::exp. Inputs are clamped to
// [-87.3, 88.3]: below, ~1e-38 instead of 0 (no softmax row or SiLU can tell them apart); above,
// ~2e38 instead of overflowing.
inline vf vexp(vf x) {
    x = x < -87.3f ? splat(-87.3f) : x;
    x = x > 88.3f ? splat(88.3f) : x;
    vf t = x * 1.44269504088896341f + 12582912.0f;  // round to nearest by the 1.5 * 2^23 trick
    vf n = t - 12582912.0f;
    vf r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    vf p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
    vf scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

}  // namespace adaspec
