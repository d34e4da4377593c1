// Fused CPU kernels of the edge op. Each (n, c) volume is processed row by row along the last
// axis: the 3x3(x3) stencil is split into a combination of neighbouring rows (scalar weights)
// followed by a 3-tap filter along the row, so every inner loop is a plain, vectorizable loop
// over contiguous memory. Backward recomputes g and m from x (nothing is saved by forward) and
// keeps only a ring of three slabs of v_d while it sweeps the outer axis.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "../checks.h"
#include "../edge_stencil.h"

namespace segnet {
namespace {

// A volume seen as (outer, middle, inner) axes: (D, H, W) in 3D, (H, 1, W) in 2D. The outer
// and inner axes are always filtered; the middle one only in 3D.
template <int NDIM>
struct Frame {
  int outer, middle, inner;
  explicit Frame(const Extent& e)
      : outer(NDIM == 3 ? e.size[0] : e.size[1]), middle(NDIM == 3 ? e.size[1] : 1), inner(e.size[2]) {}
  int64_t row_offset(int s, int r) const { return (int64_t(s) * middle + r) * inner; }
  static constexpr int kMiddleReach = NDIM == 3 ? 1 : 0;  // middle-axis taps: {-1,0,1} or {0}
};

// Derivative index (tensor order) of each frame axis.
template <int NDIM>
struct Deriv {
  static constexpr int outer = 0;
  static constexpr int middle = 1;  // 3D only
  static constexpr int inner = NDIM - 1;
};

template <typename acc_t>
void add_scaled_row(acc_t* __restrict dst, const acc_t w, const acc_t* __restrict src, int n) {
  for (int j = 0; j < n; ++j) dst[j] += w * src[j];
}

// Normalized derivatives of row (s, r): g[d][j] for j in [0, inner). `rows` holds the row's
// neighbours combined along the outer and middle axes, with one replicated sample each side.
template <int NDIM, typename scalar_t, typename acc_t>
void row_gradients(const scalar_t* vol, const Frame<NDIM>& f, int s, int r, acc_t* rows,
                   acc_t* const* g) {
  const int W = f.inner;
  const int P = W + 2;
  acc_t* t_inner = rows;           // smoothed across rows, differentiated along the row
  acc_t* t_outer = rows + P;       // differentiated along the outer axis, smoothed along the row
  acc_t* t_middle = rows + 2 * P;  // differentiated along the middle axis (3D)
  std::fill(rows, rows + 3 * P, acc_t(0));
  for (int os = -1; os <= 1; ++os) {
    for (int orow = -Frame<NDIM>::kMiddleReach; orow <= Frame<NDIM>::kMiddleReach; ++orow) {
      const scalar_t* src = vol + f.row_offset(clamp_index(s + os, f.outer), clamp_index(r + orow, f.middle));
      const acc_t ms = NDIM == 3 ? acc_t(filter_tap(kSmooth, orow)) : acc_t(1);
      const acc_t w_inner = acc_t(filter_tap(kSmooth, os)) * ms;
      const acc_t w_outer = acc_t(filter_tap(kDeriv, os)) * ms;
      const acc_t w_middle = acc_t(filter_tap(kSmooth, os)) * acc_t(filter_tap(kDeriv, orow));
      for (int j = 0; j < W; ++j) {
        const acc_t v = static_cast<acc_t>(src[j]);
        t_inner[j + 1] += w_inner * v;
        t_outer[j + 1] += w_outer * v;
        if (NDIM == 3) t_middle[j + 1] += w_middle * v;
      }
    }
  }
  for (acc_t* t : {t_inner, t_outer, t_middle}) {  // replicate border along the row
    t[0] = t[1];
    t[W + 1] = t[W];
  }
  const acc_t inv = acc_t(1) / acc_t(kernel_norm(NDIM));
  acc_t* __restrict gi = g[Deriv<NDIM>::inner];
  acc_t* __restrict go = g[Deriv<NDIM>::outer];
  for (int j = 0; j < W; ++j) {
    gi[j] = (t_inner[j + 2] - t_inner[j]) * inv;
    go[j] = (t_outer[j] + 2 * t_outer[j + 1] + t_outer[j + 2]) * inv;
  }
  if (NDIM == 3) {
    acc_t* __restrict gm = g[Deriv<NDIM>::middle];
    for (int j = 0; j < W; ++j) gm[j] = (t_middle[j] + 2 * t_middle[j + 1] + t_middle[j + 2]) * inv;
  }
}

template <int NDIM, typename acc_t>
void row_sum_of_squares(acc_t* const* g, acc_t* __restrict out, int W) {
  for (int j = 0; j < W; ++j) {
    acc_t s = 0;
    for (int d = 0; d < NDIM; ++d) s += g[d][j] * g[d][j];
    out[j] = s;
  }
}

// Per-thread scratch of a volume sweep; allocated once per parallel chunk.
template <typename acc_t>
struct Scratch {
  std::vector<acc_t> rows, grads, sumsq, grad_y;
  acc_t* g[3];
  explicit Scratch(int W) : rows(3 * (W + 2)), grads(3 * W), sumsq(W), grad_y(W) {
    for (int d = 0; d < 3; ++d) g[d] = grads.data() + d * W;
  }
};

template <int NDIM, typename scalar_t>
void forward_volume(const scalar_t* x, scalar_t* y, at::opmath_type<scalar_t> alpha,
                    at::opmath_type<scalar_t> eps, const Frame<NDIM>& f,
                    Scratch<at::opmath_type<scalar_t>>& sc) {
  using acc_t = at::opmath_type<scalar_t>;
  const int W = f.inner;
  for (int s = 0; s < f.outer; ++s) {
    for (int r = 0; r < f.middle; ++r) {
      row_gradients<NDIM>(x, f, s, r, sc.rows.data(), sc.g);
      row_sum_of_squares<NDIM>(sc.g, sc.sumsq.data(), W);
      const scalar_t* __restrict xr = x + f.row_offset(s, r);
      scalar_t* __restrict yr = y + f.row_offset(s, r);
      const acc_t* __restrict ss = sc.sumsq.data();
      for (int j = 0; j < W; ++j) {
        yr[j] = static_cast<scalar_t>(edge_output(static_cast<acc_t>(xr[j]), alpha, edge_magnitude(ss[j], eps)));
      }
    }
  }
}

// sum_j a[j] * b[j] in kLanes fixed partial sums: vectorizes without -ffast-math and adds in
// the same order on every run.
template <typename acc_t>
acc_t dot_in_lanes(const acc_t* __restrict a, const acc_t* __restrict b, int n) {
  constexpr int kLanes = 16;
  acc_t lanes[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] += a[j + k] * b[j + k];
  }
  for (; j < n; ++j) lanes[0] += a[j] * b[j];
  acc_t sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += lanes[k];
  return sum;
}

// v_d of one slab (all middle rows at outer index s) into `v` (NDIM planes of middle * inner);
// returns the slab's share of sum(grad_y * m).
template <int NDIM, typename scalar_t>
double adjoint_inputs_slab(const scalar_t* x, const scalar_t* gy, at::opmath_type<scalar_t> alpha,
                           at::opmath_type<scalar_t> eps, const Frame<NDIM>& f, int s,
                           at::opmath_type<scalar_t>* v, Scratch<at::opmath_type<scalar_t>>& sc) {
  using acc_t = at::opmath_type<scalar_t>;
  const int W = f.inner;
  const int64_t plane = int64_t(f.middle) * W;
  acc_t* __restrict m = sc.sumsq.data();   // sum of squares, then m, then alpha * gy / m
  acc_t* __restrict g = sc.grad_y.data();  // grad_y of the row in the accumulation type
  double slab_sum = 0;
  for (int r = 0; r < f.middle; ++r) {
    row_gradients<NDIM>(x, f, s, r, sc.rows.data(), sc.g);
    row_sum_of_squares<NDIM>(sc.g, m, W);
    const scalar_t* __restrict gr = gy + f.row_offset(s, r);
    for (int j = 0; j < W; ++j) {
      g[j] = static_cast<acc_t>(gr[j]);
      m[j] = edge_magnitude(m[j], eps);
    }
    slab_sum += dot_in_lanes(g, m, W);
    for (int j = 0; j < W; ++j) m[j] = adjoint_scale(alpha, g[j], m[j]);
    for (int d = 0; d < NDIM; ++d) {
      acc_t* __restrict vd = v + d * plane + int64_t(r) * W;
      const acc_t* __restrict gd = sc.g[d];
      for (int j = 0; j < W; ++j) vd[j] = m[j] * gd[j];
    }
  }
  return slab_sum;
}

// Adjoint along the row at a border sample j: the clamped taps of both filters.
template <typename acc_t>
acc_t row_adjoint_at(const acc_t* deriv_in, const acc_t* smooth_in, int j, int W) {
  acc_t sum = 0;
  for (int i = std::max(j - 1, 0); i <= std::min(j + 1, W - 1); ++i) {
    sum += acc_t(adjoint_tap(kDeriv, i, j, W)) * deriv_in[i] + acc_t(adjoint_tap(kSmooth, i, j, W)) * smooth_in[i];
  }
  return sum;
}

// grad_x for the rows of slab s, from the v_d of slabs s-1, s, s+1 (ring slots).
template <int NDIM, typename scalar_t>
void grad_input_slab(const scalar_t* gy, scalar_t* gx, const Frame<NDIM>& f, int s,
                     at::opmath_type<scalar_t>* const* ring, std::vector<at::opmath_type<scalar_t>>& rows) {
  using acc_t = at::opmath_type<scalar_t>;
  const int W = f.inner;
  const int64_t plane = int64_t(f.middle) * W;
  acc_t* __restrict s_inner = rows.data();       // feeds the inner derivative's adjoint
  acc_t* __restrict s_smooth = rows.data() + W;  // feeds the inner smoothing's adjoint
  const acc_t inv = acc_t(1) / acc_t(kernel_norm(NDIM));
  for (int r = 0; r < f.middle; ++r) {
    std::fill(rows.begin(), rows.begin() + 2 * W, acc_t(0));
    for (int os = -1; os <= 1; ++os) {
      const int sn = s + os;
      if (sn < 0 || sn >= f.outer) continue;
      const acc_t* v = ring[sn % 3];
      const acc_t o_smooth = adjoint_tap(kSmooth, sn, s, f.outer);
      const acc_t o_deriv = adjoint_tap(kDeriv, sn, s, f.outer);
      for (int orow = -Frame<NDIM>::kMiddleReach; orow <= Frame<NDIM>::kMiddleReach; ++orow) {
        const int rn = r + orow;
        if (rn < 0 || rn >= f.middle) continue;
        const acc_t m_smooth = NDIM == 3 ? acc_t(adjoint_tap(kSmooth, rn, r, f.middle)) : acc_t(1);
        const int64_t row = int64_t(rn) * W;
        add_scaled_row(s_inner, o_smooth * m_smooth, v + Deriv<NDIM>::inner * plane + row, W);
        add_scaled_row(s_smooth, o_deriv * m_smooth, v + Deriv<NDIM>::outer * plane + row, W);
        if (NDIM == 3) {
          const acc_t m_deriv = adjoint_tap(kDeriv, rn, r, f.middle);
          add_scaled_row(s_smooth, o_smooth * m_deriv, v + Deriv<NDIM>::middle * plane + row, W);
        }
      }
    }
    // Along the row: interior samples see the flipped taps, border samples the clamped ones.
    const scalar_t* __restrict gr = gy + f.row_offset(s, r);
    scalar_t* __restrict out = gx + f.row_offset(s, r);
    for (int j = 1; j < W - 1; ++j) {
      const acc_t adj = s_inner[j - 1] - s_inner[j + 1] + s_smooth[j - 1] + 2 * s_smooth[j] + s_smooth[j + 1];
      out[j] = static_cast<scalar_t>(static_cast<acc_t>(gr[j]) + adj * inv);
    }
    for (int j : {0, W - 1}) {
      out[j] = static_cast<scalar_t>(static_cast<acc_t>(gr[j]) + row_adjoint_at(s_inner, s_smooth, j, W) * inv);
    }
  }
}

template <int NDIM, typename scalar_t>
double backward_volume(const scalar_t* gy, const scalar_t* x, scalar_t* gx, at::opmath_type<scalar_t> alpha,
                       at::opmath_type<scalar_t> eps, const Frame<NDIM>& f,
                       Scratch<at::opmath_type<scalar_t>>& sc, std::vector<at::opmath_type<scalar_t>>& ring_store,
                       std::vector<at::opmath_type<scalar_t>>& rows) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t slab = int64_t(NDIM) * f.middle * f.inner;
  acc_t* ring[3] = {ring_store.data(), ring_store.data() + slab, ring_store.data() + 2 * slab};
  double total = adjoint_inputs_slab<NDIM>(x, gy, alpha, eps, f, 0, ring[0], sc);
  for (int s = 0; s < f.outer; ++s) {
    if (s + 1 < f.outer) total += adjoint_inputs_slab<NDIM>(x, gy, alpha, eps, f, s + 1, ring[(s + 1) % 3], sc);
    grad_input_slab<NDIM>(gy, gx, f, s, ring, rows);
  }
  return total;
}

at::Tensor edge_enhance_cpu(const at::Tensor& x_in, const at::Tensor& alpha_in, double eps) {
  check_edge_inputs(x_in, alpha_in);
  TORCH_CHECK(x_in.device().is_cpu(), "edge_enhance (CPU kernel): x must be a CPU tensor");
  const at::Tensor x = x_in.contiguous();
  const at::Tensor alpha = alpha_in.contiguous();
  at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  if (x.numel() == 0) return y;
  const Extent e = extent_of(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "edge_enhance_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* ap = alpha.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    auto run = [&](auto ndim_tag) {
      constexpr int NDIM = decltype(ndim_tag)::value;
      const Frame<NDIM> f(e);
      at::parallel_for(0, e.planes, 1, [&](int64_t begin, int64_t end) {
        Scratch<acc_t> sc(f.inner);
        for (int64_t p = begin; p < end; ++p) {
          forward_volume<NDIM>(xp + p * e.volume(), yp + p * e.volume(), static_cast<acc_t>(ap[p % e.channels]),
                               static_cast<acc_t>(eps), f, sc);
        }
      });
    };
    if (x.dim() == 4) run(std::integral_constant<int, 2>{});
    else run(std::integral_constant<int, 3>{});
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> edge_enhance_backward_cpu(const at::Tensor& grad_y_in, const at::Tensor& x_in,
                                                             const at::Tensor& alpha_in, double eps) {
  check_edge_backward_inputs(grad_y_in, x_in, alpha_in);
  TORCH_CHECK(x_in.device().is_cpu(), "edge_enhance_backward (CPU kernel): x must be a CPU tensor");
  const at::Tensor x = x_in.contiguous();
  const at::Tensor gy = grad_y_in.contiguous();
  const at::Tensor alpha = alpha_in.contiguous();
  at::Tensor gx = at::empty_like(x, at::MemoryFormat::Contiguous);
  if (x.numel() == 0) return {gx, at::zeros_like(alpha)};
  const Extent e = extent_of(x);
  // One partial sum per (n, c) volume, added up per channel in a fixed order: deterministic
  // and without one long running float sum.
  std::vector<double> partial(e.planes, 0.0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "edge_enhance_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* gp = gy.const_data_ptr<scalar_t>();
    const scalar_t* ap = alpha.const_data_ptr<scalar_t>();
    scalar_t* gxp = gx.mutable_data_ptr<scalar_t>();
    auto run = [&](auto ndim_tag) {
      constexpr int NDIM = decltype(ndim_tag)::value;
      const Frame<NDIM> f(e);
      at::parallel_for(0, e.planes, 1, [&](int64_t begin, int64_t end) {
        Scratch<acc_t> sc(f.inner);
        std::vector<acc_t> ring(3 * int64_t(NDIM) * f.middle * f.inner);
        std::vector<acc_t> rows(2 * f.inner);
        for (int64_t p = begin; p < end; ++p) {
          const int64_t off = p * e.volume();
          partial[p] = backward_volume<NDIM>(gp + off, xp + off, gxp + off, static_cast<acc_t>(ap[p % e.channels]),
                                             static_cast<acc_t>(eps), f, sc, ring, rows);
        }
      });
    };
    if (x.dim() == 4) run(std::integral_constant<int, 2>{});
    else run(std::integral_constant<int, 3>{});
  });
  std::vector<double> per_channel(e.channels, 0.0);
  for (int64_t p = 0; p < e.planes; ++p) per_channel[p % e.channels] += partial[p];
  at::Tensor grad_alpha = at::tensor(per_channel, at::kDouble).to(alpha.scalar_type());
  return {gx, grad_alpha};
}

}  // namespace
}  // namespace segnet

TORCH_LIBRARY_IMPL(segnet_ops, CPU, m) {
  m.impl("edge_enhance", &segnet::edge_enhance_cpu);
  m.impl("edge_enhance_backward", &segnet::edge_enhance_backward_cpu);
}
