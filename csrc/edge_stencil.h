// Per-element math of the edge-enhancement op (shared/design/edge-op.md), shared by the CPU
// kernels, the CUDA kernels and the host emulation of the CUDA kernels. Everything here is a
// pure inline function so that the same arithmetic runs on both sides.
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
SEGNET_HD float kernel_norm(int ndim) { return ndim == 2 ? 8.0f : 32.0f; }

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

// Filter that derivative d applies along spatial axis a (both counted in tensor order).
SEGNET_HD int axis_filter(int a, int d) { return a == d ? kDeriv : kSmooth; }

template <typename T>
SEGNET_HD T edge_magnitude(T sum_of_squares, T eps) {
  using std::sqrt;  // float stays float on the host; CUDA provides the same overloads
  return sqrt(sum_of_squares + eps);
}

// Forward output: y = x + alpha * m.
template <typename T>
SEGNET_HD T edge_output(T x, T alpha, T m) {
  return x + alpha * m;
}

// Factor that turns g_d into v_d = alpha * grad_y * g_d / m.
template <typename T>
SEGNET_HD T adjoint_scale(T alpha, T grad_y, T m) {
  return alpha * grad_y / m;
}

// Normalized Sobel derivatives g[0..NDIM) at one point, read through at(o0, o1, o2), a functor
// returning the (already clamped) input at the offset; for NDIM == 2 o0 is always 0.
template <int NDIM, typename T, typename At>
SEGNET_HD void sobel_gradients(const At& at, T* g) {
  constexpr int lead = 3 - NDIM;  // axes before the spatial ones in the (o0, o1, o2) frame
  for (int d = 0; d < NDIM; ++d) g[d] = T(0);
  for (int o0 = (NDIM == 3 ? -1 : 0); o0 <= (NDIM == 3 ? 1 : 0); ++o0) {
    for (int o1 = -1; o1 <= 1; ++o1) {
      for (int o2 = -1; o2 <= 1; ++o2) {
        const int off[3] = {o0, o1, o2};
        const T v = at(o0, o1, o2);
        for (int d = 0; d < NDIM; ++d) {
          float w = 1.0f;
          for (int a = 0; a < NDIM; ++a) w *= filter_tap(axis_filter(a, d), off[lead + a]);
          g[d] += T(w) * v;
        }
      }
    }
  }
  const T inv = T(1) / T(kernel_norm(NDIM));
  for (int d = 0; d < NDIM; ++d) g[d] *= inv;
}

// sum_d K_d^T v_d at position pos of a grid of the given size (three axes; for NDIM == 2 the
// first is size 1): v(d, o0, o1, o2) returns v_d at pos + o, which must lie inside the grid.
template <int NDIM, typename T, typename V>
SEGNET_HD T adjoint_gather(const int* pos, const int* size, const V& v) {
  constexpr int lead = 3 - NDIM;
  // Per axis, filter and offset: the clamped-adjoint weight, zero where pos + o leaves the grid.
  float w[3][2][3];
  for (int a = 0; a < 3; ++a) {
    for (int f = 0; f < 2; ++f) {
      for (int o = -1; o <= 1; ++o) {
        const int i = pos[a] + o;
        const bool inside = i >= 0 && i < size[a];
        w[a][f][o + 1] = inside ? adjoint_tap(f, i, pos[a], size[a]) : 0.0f;
      }
    }
  }
  T sum = T(0);
  for (int o0 = (NDIM == 3 ? -1 : 0); o0 <= (NDIM == 3 ? 1 : 0); ++o0) {
    for (int o1 = -1; o1 <= 1; ++o1) {
      for (int o2 = -1; o2 <= 1; ++o2) {
        const int off[3] = {o0, o1, o2};
        for (int d = 0; d < NDIM; ++d) {
          float wd = 1.0f;
          for (int a = 0; a < NDIM; ++a) {
            wd *= w[lead + a][axis_filter(a, d)][off[lead + a] + 1];
          }
          if (wd != 0.0f) sum += T(wd) * v(d, o0, o1, o2);
        }
      }
    }
  }
  return sum / T(kernel_norm(NDIM));
}

}  // namespace segnet
