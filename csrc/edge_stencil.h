// The edge-enhancement op's stencil and per-element math (docs/edge-op.md), as pure inline
// functions that compile for the host and the device. The CPU kernels use all of it. The CUDA
// march (csrc/march/) and its host emulation use clamp_index (the replicate border) and
// kernel_norm: they fold the normalization into their constants and take the device's square
// roots (march/device_math.h), so the magnitude, the output and the adjoint's scale are written
// there in that form; the tests hold both to the same float64 reference.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define SEGNET_HD __host__ __device__ __forceinline__
#else
#define SEGNET_HD inline
#endif

namespace segnet {

// The two 3-tap filters of a normalized Sobel kernel, indexed by tap offset k in {-1, 0, 1}.
enum Filter : int { kSmooth = 0, kDeriv = 1 };

SEGNET_HD int clamp_index(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }

SEGNET_HD float filter_tap(int filter, int k) {
  return filter == kDeriv ? static_cast<float>(k) : (k == 0 ? 2.0f : 1.0f);
}

// Sum of the absolute taps of one K_d: 2 * 4 in 2D, 2 * 4 * 4 in 3D.
constexpr SEGNET_HD float kernel_norm(int ndim) { return ndim == 2 ? 8.0f : 32.0f; }

// Weight with which sample i of a clamped 3-tap correlation reads sample j of an axis of
// length n: the taps whose clamped position lands on j add up (replicate border).
// The adjoint of the correlation sends v[i] to j with exactly this weight.
SEGNET_HD float adjoint_tap(int filter, int i, int j, int n) {
  float w = 0.0f;
  for (int k = -1; k <= 1; ++k) {
    if (clamp_index(i + k, n) == j) w += filter_tap(filter, k);
  }
  return w;
}

template <typename T>
SEGNET_HD T edge_magnitude(T sum_of_squares, T eps) {
  using std::sqrt;  // float stays float on the host; CUDA provides the same overloads
  return sqrt(sum_of_squares + eps);
}

// The op's identity term, x in y and grad_y in grad_x, which the magnitude form (y = m, with
// alpha = 1) leaves out. Added as 0 there, so that the expressions, and the op's results, are
// the same in both forms.
template <typename T>
SEGNET_HD T identity_term(bool residual, T value) {
  return residual ? value : T(0);
}

// Forward output: y = x + alpha * m, or alpha * m in the magnitude form.
template <typename T>
SEGNET_HD T edge_output(T x, T alpha, T m, bool residual) {
  return identity_term(residual, x) + alpha * m;
}

// Factor that turns g_d into v_d = alpha * grad_y * g_d / m.
template <typename T>
SEGNET_HD T adjoint_scale(T alpha, T grad_y, T m) {
  return alpha * grad_y / m;
}

}  // namespace segnet
