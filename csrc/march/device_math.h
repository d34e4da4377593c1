// The march's square roots: sqrt(s) and 1 / sqrt(s) of the magnitude's argument
// s = sum_d g_d^2 + N^2 eps, as the GPU computes them, and the same arithmetic on the host so
// that the emulation sees what the GPU would.
//
// float32 uses the special-function unit, one instruction each (`rsqrt.approx.ftz.f32`,
// `sqrt.approx.ftz.f32`): a correctly rounded sqrtf costs a dozen instructions and a slow path.
// The PTX ISA bounds their relative error by 2^-22.9 (rsqrt) and 2^-23 (sqrt), and `.ftz` reads a
// subnormal argument as 0. float64 refines the hardware's approximation
// (`rsqrt.approx.ftz.f64`, about 2^-22.9 as well) with two Newton steps, and takes sqrt as
// s * rsqrt(s): the library's versions would add a slow-path call inside the loop.
//
// The host emulation reproduces what decides correctness: the flush of subnormal arguments to 0
// (rsqrt(0) = inf) and an approximation that is off by the bound (it rounds 1 / sqrt(s) up by a
// relative 2^-22), followed in float64 by the same Newton steps. s never reaches the flush in
// the product: the launcher floors N^2 eps at the smallest normal number (march_eps()).
#pragma once

#include <cmath>
#include <limits>

#include "../edge_stencil.h"

namespace segnet {

// The smallest normal number of T: `.ftz` reads anything smaller as 0.
template <typename T>
constexpr T smallest_normal() {
  return std::numeric_limits<T>::min();
}

// The passes' eps: N^2 eps in acc_t (the normalization folded in, see forward.h), raised to the
// smallest normal number where it would be subnormal, so that s = sum_d g_d^2 + N^2 eps is never
// flushed to 0 (a flat region would get inf / NaN gradients). Computed by the launcher.
template <typename acc_t>
inline acc_t march_eps(int ndim, double eps) {
  const double norm = kernel_norm(ndim);
  const acc_t folded = static_cast<acc_t>(eps * norm * norm);
  return folded < smallest_normal<acc_t>() ? smallest_normal<acc_t>() : folded;
}

#if !defined(__CUDA_ARCH__)
// What the special-function unit's approximations give on the host: the argument flushed to 0
// when subnormal, the result off by the documented bound.
template <typename T>
inline T flushed_to_zero(T s) {
  return std::fabs(s) < smallest_normal<T>() ? std::copysign(T(0), s) : s;
}
template <typename T>
inline T off_by_the_bound(T root) {
  return root * (T(1) + std::ldexp(T(1), -22));
}
template <typename T>
inline T emulated_rsqrt_approx(T s) {
  return off_by_the_bound(T(1) / std::sqrt(flushed_to_zero(s)));
}
inline float emulated_sqrt_approx(float s) { return off_by_the_bound(std::sqrt(flushed_to_zero(s))); }
#endif

SEGNET_HD float fast_rsqrt(float s) {
#if defined(__CUDA_ARCH__)
  float root;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(root) : "f"(s));
  return root;
#else
  return emulated_rsqrt_approx(s);
#endif
}

SEGNET_HD float fast_sqrt(float s) {
#if defined(__CUDA_ARCH__)
  float root;
  asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(root) : "f"(s));
  return root;
#else
  return emulated_sqrt_approx(s);
#endif
}

SEGNET_HD double fast_rsqrt(double s) {
#if defined(__CUDA_ARCH__)
  double r;
  asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(s));
#else
  double r = emulated_rsqrt_approx(s);
#endif
  // Two Newton steps, each doubling the correct bits.
  r = r * (1.5 - 0.5 * s * r * r);
  return r * (1.5 - 0.5 * s * r * r);
}

// s >= march_eps() > 0 in the passes; an infinite s (x holds inf) keeps its root inf.
SEGNET_HD double fast_sqrt(double s) {
  return s < INFINITY ? s * fast_rsqrt(s) : s;
}

}  // namespace segnet
