// Fused CPU kernels of the edge op. Each (n, c) volume is swept slab by slab along its outer
// axis, and the separable 3x3(x3) stencil is applied one axis at a time: across the rows of a
// slab (middle axis, 3D only), across three slabs (outer axis), then along the row (inner
// axis), so every inner loop is a plain, vectorizable loop over contiguous memory and each
// input sample is combined a handful of times instead of 27. Backward recomputes g and m from
// x (nothing is saved by forward) and keeps only rings of three slabs while it sweeps. Threads
// share the work by (volume, slab range): a batch with fewer volumes than threads has each
// volume cut into ranges of slabs, each of which recomputes the slab or two it needs past its
// ends.
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
};

// Derivative index (tensor order) of each frame axis.
template <int NDIM>
struct Deriv {
  static constexpr int outer = 0;
  static constexpr int middle = 1;  // 3D only
  static constexpr int inner = NDIM - 1;
};

// The middle-axis pass of the separable stencil, kept for the three slabs around the one being
// processed (slot = slab % 3): every row smoothed ([1,2,1]) and differentiated ([-1,0,1])
// across its neighbouring rows. In 2D the middle axis has one row and no filter: the smoothed
// row is the row itself and nothing is differentiated.
template <int NDIM, typename acc_t>
struct MiddlePass {
  int plane;  // middle * inner
  int filled = -1;  // highest slab computed so far
  std::vector<acc_t> smooth, deriv;

  explicit MiddlePass(const Frame<NDIM>& f)
      : plane(f.middle * f.inner), smooth(3 * size_t(plane)), deriv(NDIM == 3 ? 3 * size_t(plane) : 0) {}

  const acc_t* smoothed(int slab, int r, int W) const { return smooth.data() + (slab % 3) * plane + r * W; }
  const acc_t* differentiated(int slab, int r, int W) const { return deriv.data() + (slab % 3) * plane + r * W; }

  void restart(int first) { filled = first - 1; }  // a new range of slabs, from slab `first` on

  // Make slabs up to `last` available (they are needed in order, each once).
  template <typename scalar_t>
  void advance_to(const scalar_t* vol, const Frame<NDIM>& f, int last) {
    for (last = std::min(last, f.outer - 1); filled < last;) compute(vol, f, ++filled);
  }

  template <typename scalar_t>
  void compute(const scalar_t* vol, const Frame<NDIM>& f, int s) {
    const int W = f.inner;
    for (int r = 0; r < f.middle; ++r) {
      acc_t* __restrict sm = smooth.data() + (s % 3) * plane + r * W;
      const scalar_t* __restrict mid = vol + f.row_offset(s, r);
      if (NDIM == 2) {
        for (int j = 0; j < W; ++j) sm[j] = static_cast<acc_t>(mid[j]);
        continue;
      }
      acc_t* __restrict dv = deriv.data() + (s % 3) * plane + r * W;
      const scalar_t* __restrict up = vol + f.row_offset(s, clamp_index(r - 1, f.middle));
      const scalar_t* __restrict down = vol + f.row_offset(s, clamp_index(r + 1, f.middle));
      for (int j = 0; j < W; ++j) {
        const acc_t a = static_cast<acc_t>(up[j]), b = static_cast<acc_t>(mid[j]), c = static_cast<acc_t>(down[j]);
        sm[j] = a + 2 * b + c;
        dv[j] = c - a;
      }
    }
  }
};

// The outer-axis pass for row (s, r), from the middle pass of slabs s-1, s, s+1 (clamped):
// three rows of `rows` (each inner + 2 long, one replicated sample each side) that the pass
// along the row turns into derivatives. Returns pointers to their first real sample.
template <int NDIM, typename acc_t>
struct OuterPass {
  acc_t* inner;   // smoothed across rows: the inner derivative differentiates it along the row
  acc_t* outer;   // differentiated along the outer axis: smoothed along the row
  acc_t* middle;  // differentiated along the middle axis (3D): smoothed along the row
};

template <int NDIM, typename acc_t>
OuterPass<NDIM, acc_t> outer_pass(const MiddlePass<NDIM, acc_t>& mp, const Frame<NDIM>& f, int s, int r, acc_t* rows) {
  const int W = f.inner;
  const int P = W + 2;
  acc_t* __restrict t_inner = rows + 1;
  acc_t* __restrict t_outer = rows + P + 1;
  acc_t* __restrict t_middle = rows + 2 * P + 1;
  const int before = clamp_index(s - 1, f.outer), after = clamp_index(s + 1, f.outer);
  const acc_t* __restrict sa = mp.smoothed(before, r, W);
  const acc_t* __restrict sb = mp.smoothed(s, r, W);
  const acc_t* __restrict sc = mp.smoothed(after, r, W);
  for (int j = 0; j < W; ++j) {
    t_inner[j] = sa[j] + 2 * sb[j] + sc[j];
    t_outer[j] = sc[j] - sa[j];
  }
  if (NDIM == 3) {
    const acc_t* __restrict da = mp.differentiated(before, r, W);
    const acc_t* __restrict db = mp.differentiated(s, r, W);
    const acc_t* __restrict dc = mp.differentiated(after, r, W);
    for (int j = 0; j < W; ++j) t_middle[j] = da[j] + 2 * db[j] + dc[j];
  }
  for (acc_t* t : {t_inner, t_outer, t_middle}) {  // replicate border along the row
    t[-1] = t[0];
    t[W] = t[W - 1];
  }
  return {t_inner, t_outer, t_middle};
}

// The pass along the row at sample j: the normalized derivatives (tensor order).
template <int NDIM, typename acc_t>
inline void derivatives_at(const OuterPass<NDIM, acc_t>& t, int j, acc_t inv, acc_t* g) {
  g[Deriv<NDIM>::inner] = (t.inner[j + 1] - t.inner[j - 1]) * inv;
  g[Deriv<NDIM>::outer] = (t.outer[j - 1] + 2 * t.outer[j] + t.outer[j + 1]) * inv;
  if (NDIM == 3) g[Deriv<NDIM>::middle] = (t.middle[j - 1] + 2 * t.middle[j] + t.middle[j + 1]) * inv;
}

// Per-thread scratch of a volume sweep; allocated once per parallel chunk.
template <int NDIM, typename acc_t>
struct Scratch {
  std::vector<acc_t> rows;          // the outer-axis pass of one row
  std::vector<acc_t> v_slab;        // backward, 3D: one slab's v_d before the middle-axis adjoint
  std::vector<acc_t> ring;          // backward: three slabs of middle-adjoined v_d
  std::vector<acc_t> adjoint_rows;  // backward: one row's inputs to the adjoint along the row
  MiddlePass<NDIM, acc_t> middle;
  Scratch(const Frame<NDIM>& f, bool backward)
      : rows(3 * (f.inner + 2)),
        v_slab(backward && NDIM == 3 ? size_t(NDIM) * f.middle * f.inner : 0),
        ring(backward ? 3 * size_t(NDIM) * f.middle * f.inner : 0),
        adjoint_rows(backward ? 2 * size_t(f.inner) : 0),
        middle(f) {}
};

// Slabs [begin, end) of a volume's outputs.
template <int NDIM, typename scalar_t>
void forward_slabs(const scalar_t* x, scalar_t* y, at::opmath_type<scalar_t> alpha, at::opmath_type<scalar_t> eps,
                   const Frame<NDIM>& f, Scratch<NDIM, at::opmath_type<scalar_t>>& sc, int begin, int end) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t inv = acc_t(1) / acc_t(kernel_norm(NDIM));
  sc.middle.restart(std::max(begin - 1, 0));
  for (int s = begin; s < end; ++s) {
    sc.middle.advance_to(x, f, s + 1);
    for (int r = 0; r < f.middle; ++r) {
      const OuterPass<NDIM, acc_t> t = outer_pass(sc.middle, f, s, r, sc.rows.data());
      const scalar_t* __restrict xr = x + f.row_offset(s, r);
      scalar_t* __restrict yr = y + f.row_offset(s, r);
      for (int j = 0; j < f.inner; ++j) {  // the pass along the row, fused with the output
        acc_t d[3];
        derivatives_at<NDIM>(t, j, inv, d);
        acc_t sum_of_squares = 0;
        for (int k = 0; k < NDIM; ++k) sum_of_squares += d[k] * d[k];
        yr[j] = static_cast<scalar_t>(edge_output(static_cast<acc_t>(xr[j]), alpha, edge_magnitude(sum_of_squares, eps)));
      }
    }
  }
}

// v_d of one slab (all middle rows at outer index s) into `v` (NDIM planes of middle * inner);
// returns the slab's share of sum(grad_y * m). The pass along the row, the magnitude and v_d
// are one loop; its sum runs in kLanes fixed partial sums, which vectorize without -ffast-math
// and add up in the same order on every run.
template <int NDIM, typename scalar_t>
double adjoint_inputs_slab(const scalar_t* x, const scalar_t* gy, at::opmath_type<scalar_t> alpha,
                           at::opmath_type<scalar_t> eps, const Frame<NDIM>& f, int s,
                           at::opmath_type<scalar_t>* v, Scratch<NDIM, at::opmath_type<scalar_t>>& sc) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int kLanes = 16;
  const int W = f.inner;
  const int64_t plane = int64_t(f.middle) * W;
  const acc_t inv = acc_t(1) / acc_t(kernel_norm(NDIM));
  double slab_sum = 0;
  sc.middle.advance_to(x, f, s + 1);
  for (int r = 0; r < f.middle; ++r) {
    const OuterPass<NDIM, acc_t> t = outer_pass(sc.middle, f, s, r, sc.rows.data());
    const scalar_t* __restrict gr = gy + f.row_offset(s, r);
    acc_t* __restrict v0 = v + int64_t(r) * W;
    acc_t* __restrict v1 = v0 + plane;
    acc_t* __restrict v2 = v0 + 2 * plane;
    auto at = [&](int j) {  // v_d at sample j; returns grad_y * m there
      acc_t d[3];
      derivatives_at<NDIM>(t, j, inv, d);
      acc_t sum_of_squares = 0;
      for (int k = 0; k < NDIM; ++k) sum_of_squares += d[k] * d[k];
      const acc_t m = edge_magnitude(sum_of_squares, eps);
      const acc_t g = static_cast<acc_t>(gr[j]);
      const acc_t scale = adjoint_scale(alpha, g, m);
      v0[j] = scale * d[0];
      v1[j] = scale * d[1];
      if (NDIM == 3) v2[j] = scale * d[2];
      return g * m;
    };
    acc_t lanes[kLanes] = {};
    int j = 0;
    for (; j + kLanes <= W; j += kLanes) {
      for (int k = 0; k < kLanes; ++k) lanes[k] += at(j + k);
    }
    for (; j < W; ++j) lanes[0] += at(j);
    acc_t row_sum = 0;
    for (int k = 0; k < kLanes; ++k) row_sum += lanes[k];
    slab_sum += row_sum;
  }
  return slab_sum;
}

// Where sample i of an axis of length n gathers from in the adjoint of a clamped 3-tap filter:
// its neighbours i-1, i, i+1 with their weights. A neighbour outside the axis gets weight 0 and
// index i, so that the loops that read it need no branch.
struct AdjointTaps {
  int index[3];
  float weight[3];
};

inline AdjointTaps adjoint_taps(int filter, int i, int n) {
  AdjointTaps t;
  for (int k = 0; k < 3; ++k) {
    const int neighbour = i + k - 1;
    const bool inside = neighbour >= 0 && neighbour < n;
    t.index[k] = inside ? neighbour : i;
    t.weight[k] = inside ? adjoint_tap(filter, neighbour, i, n) : 0.0f;
  }
  return t;
}

// out[j] = sum_k w[k] * in[k][j]
template <typename acc_t>
void combine3(acc_t* __restrict out, const acc_t* const* in, const float* w, int n) {
  const acc_t w0 = w[0], w1 = w[1], w2 = w[2];
  const acc_t* __restrict a = in[0];
  const acc_t* __restrict b = in[1];
  const acc_t* __restrict c = in[2];
  for (int j = 0; j < n; ++j) out[j] = w0 * a[j] + w1 * b[j] + w2 * c[j];
}

// 3D: the middle-axis part of sum_d K_d^T v_d for one slab, from its v planes into `a`
// (derivative d differentiates along the middle axis when d is the middle one).
template <int NDIM, typename acc_t>
void middle_adjoint(const acc_t* v, acc_t* a, const Frame<NDIM>& f) {
  const int W = f.inner;
  const int64_t plane = int64_t(f.middle) * W;
  for (int r = 0; r < f.middle; ++r) {
    for (int d = 0; d < NDIM; ++d) {
      const AdjointTaps t = adjoint_taps(d == Deriv<NDIM>::middle ? kDeriv : kSmooth, r, f.middle);
      const acc_t* in[3];
      for (int k = 0; k < 3; ++k) in[k] = v + d * plane + int64_t(t.index[k]) * W;
      combine3(a + d * plane + int64_t(r) * W, in, t.weight, W);
    }
  }
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

// grad_x for the rows of slab s, from the middle-adjoined v_d of slabs s-1, s, s+1 (ring
// slots): the outer-axis part, then the pass along the row.
template <int NDIM, typename scalar_t>
void grad_input_slab(const scalar_t* gy, scalar_t* gx, const Frame<NDIM>& f, int s,
                     at::opmath_type<scalar_t>* const* ring, std::vector<at::opmath_type<scalar_t>>& rows) {
  using acc_t = at::opmath_type<scalar_t>;
  const int W = f.inner;
  const int64_t plane = int64_t(f.middle) * W;
  acc_t* __restrict s_inner = rows.data();       // feeds the inner derivative's adjoint
  acc_t* __restrict s_smooth = rows.data() + W;  // feeds the inner smoothing's adjoint
  const acc_t inv = acc_t(1) / acc_t(kernel_norm(NDIM));
  const AdjointTaps smooth = adjoint_taps(kSmooth, s, f.outer);
  const AdjointTaps deriv = adjoint_taps(kDeriv, s, f.outer);  // same neighbours, other weights
  for (int r = 0; r < f.middle; ++r) {
    const int64_t row = int64_t(r) * W;
    const acc_t* inner[3];
    const acc_t* outer[3];
    const acc_t* middle[3];
    for (int k = 0; k < 3; ++k) {
      const acc_t* a = ring[smooth.index[k] % 3];
      inner[k] = a + Deriv<NDIM>::inner * plane + row;
      outer[k] = a + Deriv<NDIM>::outer * plane + row;
      middle[k] = a + (NDIM == 3 ? Deriv<NDIM>::middle : 0) * plane + row;
    }
    combine3(s_inner, inner, smooth.weight, W);
    combine3(s_smooth, outer, deriv.weight, W);
    if (NDIM == 3) {
      const acc_t w0 = smooth.weight[0], w1 = smooth.weight[1], w2 = smooth.weight[2];
      for (int j = 0; j < W; ++j) s_smooth[j] += w0 * middle[0][j] + w1 * middle[1][j] + w2 * middle[2][j];
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

// One slab's v_d, middle-adjoined (3D) into its ring slot; returns its share of grad_alpha.
template <int NDIM, typename scalar_t>
double fill_ring_slot(const scalar_t* gy, const scalar_t* x, at::opmath_type<scalar_t> alpha,
                      at::opmath_type<scalar_t> eps, const Frame<NDIM>& f, int s, at::opmath_type<scalar_t>* slot,
                      Scratch<NDIM, at::opmath_type<scalar_t>>& sc) {
  if (NDIM == 2) return adjoint_inputs_slab<NDIM>(x, gy, alpha, eps, f, s, slot, sc);  // no middle axis
  const double share = adjoint_inputs_slab<NDIM>(x, gy, alpha, eps, f, s, sc.v_slab.data(), sc);
  middle_adjoint(sc.v_slab.data(), slot, f);
  return share;
}

// grad_x at slabs [begin, end) of a volume; returns their share of grad_alpha. The adjoint
// reaches one slab to each side, so v is computed from slab begin - 1 to end (the slabs outside
// the range add nothing to the share).
template <int NDIM, typename scalar_t>
double backward_slabs(const scalar_t* gy, const scalar_t* x, scalar_t* gx, at::opmath_type<scalar_t> alpha,
                      at::opmath_type<scalar_t> eps, const Frame<NDIM>& f, Scratch<NDIM, at::opmath_type<scalar_t>>& sc,
                      int begin, int end) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t slab = int64_t(NDIM) * f.middle * f.inner;
  acc_t* ring[3] = {sc.ring.data(), sc.ring.data() + slab, sc.ring.data() + 2 * slab};
  const int first = std::max(begin - 1, 0);
  sc.middle.restart(std::max(first - 1, 0));
  double total = 0;
  auto fill = [&](int s) {
    const double share = fill_ring_slot<NDIM>(gy, x, alpha, eps, f, s, ring[s % 3], sc);
    if (s >= begin && s < end) total += share;
  };
  for (int s = first; s <= begin; ++s) fill(s);
  for (int s = begin; s < end; ++s) {
    if (s + 1 < f.outer) fill(s + 1);
    grad_input_slab<NDIM>(gy, gx, f, s, ring, sc.adjoint_rows);
  }
  return total;
}

// Each (n, c) volume is cut into this many slab ranges along the outer axis, so that a batch
// with fewer volumes than threads (one 3D volume at inference) still uses every thread. Ranges
// of at least kMinSlabs slabs keep the recomputed halo slabs a small share.
constexpr int kMinSlabs = 8;

inline int slab_ranges(int64_t planes, int outer) {
  const int64_t threads = at::get_num_threads();
  if (planes >= threads) return 1;
  const int64_t wanted = (threads + planes - 1) / planes;
  return int(std::max<int64_t>(1, std::min<int64_t>(wanted, outer / kMinSlabs)));
}

// Runs work(item, plane, begin, end, scratch) for every (volume, slab range) item, spread over
// threads.
template <int NDIM, typename acc_t, typename F>
void for_each_slab_range(const Extent& e, const Frame<NDIM>& f, int ranges, bool backward, F&& work) {
  at::parallel_for(0, e.planes * ranges, 1, [&](int64_t item_begin, int64_t item_end) {
    Scratch<NDIM, acc_t> sc(f, backward);
    for (int64_t item = item_begin; item < item_end; ++item) {
      const int r = int(item % ranges);
      const int begin = int(int64_t(f.outer) * r / ranges), end = int(int64_t(f.outer) * (r + 1) / ranges);
      work(item, item / ranges, begin, end, sc);
    }
  });
}

at::Tensor edge_enhance_cpu(const at::Tensor& x_in, const at::Tensor& alpha_in, double eps) {
  TORCH_CHECK(x_in.device().is_cpu(), "edge_enhance (CPU kernel): x must be a CPU tensor");
  const ForwardCall call(x_in, alpha_in, eps);
  const at::Tensor &x = call.x, &alpha = call.alpha, &y = call.y;
  if (call.empty()) return y;
  const Extent e = extent_of(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "edge_enhance_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* ap = alpha.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    auto run = [&](auto ndim_tag) {
      constexpr int NDIM = decltype(ndim_tag)::value;
      const Frame<NDIM> f(e);
      for_each_slab_range<NDIM, acc_t>(e, f, slab_ranges(e.planes, f.outer), false,
                                       [&](int64_t, int64_t p, int begin, int end, Scratch<NDIM, acc_t>& sc) {
                                         forward_slabs<NDIM>(xp + p * e.volume(), yp + p * e.volume(),
                                                             static_cast<acc_t>(ap[p % e.channels]),
                                                             static_cast<acc_t>(eps), f, sc, begin, end);
                                       });
    };
    if (x.dim() == 4) run(std::integral_constant<int, 2>{});
    else run(std::integral_constant<int, 3>{});
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> edge_enhance_backward_cpu(const at::Tensor& grad_y_in, const at::Tensor& x_in,
                                                             const at::Tensor& alpha_in, double eps) {
  TORCH_CHECK(x_in.device().is_cpu(), "edge_enhance_backward (CPU kernel): x must be a CPU tensor");
  const BackwardCall call(grad_y_in, x_in, alpha_in, eps);
  const at::Tensor &x = call.x, &gy = call.grad_y, &alpha = call.alpha, &gx = call.grad_x;
  if (call.empty()) return call.result();
  const Extent e = extent_of(x);
  // One partial sum per (n, c) volume and slab range, added up per channel in a fixed order:
  // deterministic and without one long running float sum.
  std::vector<double> partial;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "edge_enhance_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* gp = gy.const_data_ptr<scalar_t>();
    const scalar_t* ap = alpha.const_data_ptr<scalar_t>();
    scalar_t* gxp = gx.mutable_data_ptr<scalar_t>();
    auto run = [&](auto ndim_tag) {
      constexpr int NDIM = decltype(ndim_tag)::value;
      const Frame<NDIM> f(e);
      const int ranges = slab_ranges(e.planes, f.outer);
      partial.assign(e.planes * ranges, 0.0);
      for_each_slab_range<NDIM, acc_t>(e, f, ranges, true,
                                       [&](int64_t item, int64_t p, int begin, int end, Scratch<NDIM, acc_t>& sc) {
                                         const int64_t off = p * e.volume();
                                         partial[item] = backward_slabs<NDIM>(
                                             gp + off, xp + off, gxp + off, static_cast<acc_t>(ap[p % e.channels]),
                                             static_cast<acc_t>(eps), f, sc, begin, end);
                                       });
    };
    if (x.dim() == 4) run(std::integral_constant<int, 2>{});
    else run(std::integral_constant<int, 3>{});
  });
  std::vector<double> per_channel(e.channels, 0.0);
  const int64_t ranges = int64_t(partial.size()) / e.planes;
  for (int64_t item = 0; item < int64_t(partial.size()); ++item) per_channel[(item / ranges) % e.channels] += partial[item];
  call.grad_alpha.copy_(at::tensor(per_channel, at::kDouble));
  return call.result();
}

}  // namespace
}  // namespace segnet

TORCH_LIBRARY_IMPL(segnet_ops, CPU, m) {
  m.impl("edge_enhance", &segnet::edge_enhance_cpu);
  m.impl("edge_enhance_backward", &segnet::edge_enhance_backward_cpu);
}
