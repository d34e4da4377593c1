// Fused CPU kernels of the edge op. Each (n, c) volume is swept plane by plane along its outer
// axis, and each plane row by row along its middle axis; the separable 3x3(x3) stencil is
// applied one axis at a time: along the outer axis (over three planes of x), across the rows
// of a plane (middle axis, 3D only), then along the row (inner axis), so every inner loop is a
// plain, vectorizable loop over contiguous memory and each input sample is combined a handful
// of times instead of 27. Backward recomputes g and m from x (nothing is saved by forward) and
// applies the adjoint in the reverse order: along the row, across the rows, along the outer
// axis, the last one scattered: each plane adds its share to grad_x of the plane before it, which
// it completes, and to the running sums of itself and the plane after it. Intermediate values
// live in rings of three rows (in L1) and, backward, of two planes of running sums (in L2), so x
// and grad_y are read from memory once and the output is written once. Threads share the work
// by (volume, plane range): a batch with fewer volumes than threads has each volume cut into
// ranges of planes, each of which recomputes the plane or two it needs past its ends.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../checks.h"
#include "../edge_stencil.h"

namespace segnet {
namespace {

// A volume seen as (outer, middle, inner) axes: (D, H, W) in 3D, (H, 1, W) in 2D. The outer
// and inner axes are always filtered; the middle one only in 3D. A plane is all the rows at one
// outer index: contiguous in memory.
template <int NDIM>
struct Frame {
  int outer, middle, inner;
  explicit Frame(const Extent& e)
      : outer(NDIM == 3 ? e.size[0] : e.size[1]), middle(NDIM == 3 ? e.size[1] : 1), inner(e.size[2]) {}
  int64_t plane() const { return int64_t(middle) * inner; }
  int64_t row_offset(int s, int r) const { return (int64_t(s) * middle + r) * inner; }
};

// One value per derivative, by the axis it differentiates along (2D has no middle one: 0).
template <typename acc_t>
struct Triple {
  acc_t outer, middle, inner;
};

// Three rows of the same length, one per derivative as above.
template <typename acc_t>
struct Rows {
  acc_t* outer;
  acc_t* middle;
  acc_t* inner;
};

// Per-thread scratch of a volume sweep, allocated once per parallel chunk. Rings hold three rows
// (slot = row % 3) or two planes (slot = plane % 2).
template <int NDIM, typename acc_t>
struct Scratch {
  int inner;
  int64_t plane;
  std::vector<acc_t> along_outer;  // ring of rows: x smoothed, then x differentiated along the outer axis
  std::vector<acc_t> padded;       // one row's derivative inputs (3); backward: its v_d (3)
  std::vector<acc_t> adjoined;       // backward, 3D: ring of rows of v_d adjoined along the row (3 each)
  std::vector<acc_t> ghost_middle;   // backward, 3D: the middle one of a ghost row (ghost_row)
  std::vector<acc_t> outer_sums;     // backward: ring of planes of grad_x's adjoint along the outer axis so far

  Scratch(const Frame<NDIM>& f, bool backward)
      : inner(f.inner),
        plane(f.plane()),
        along_outer(6 * size_t(inner)),
        padded((backward ? 6 : 3) * size_t(inner + 2)),
        adjoined(backward && NDIM == 3 ? 9 * size_t(inner) : 0),
        ghost_middle(backward && NDIM == 3 ? size_t(inner) : 0),
        outer_sums(backward ? 2 * size_t(plane) : 0) {}

  acc_t* smoothed_along_outer(int r) { return along_outer.data() + (r % 3) * size_t(inner); }
  acc_t* differentiated_along_outer(int r) { return along_outer.data() + (3 + r % 3) * size_t(inner); }
  acc_t* padded_row(int k) { return padded.data() + k * size_t(inner + 2) + 1; }
  Rows<acc_t> adjoined_row(int r) { return three_rows(adjoined.data() + 3 * (r % 3) * size_t(inner), inner); }
  acc_t* outer_sum(int s) { return outer_sums.data() + (s % 2) * plane; }

 private:
  static Rows<acc_t> three_rows(acc_t* first, int stride) { return {first, first + stride, first + 2 * stride}; }
};

// The row loops below carry `#pragma omp simd`: their rows never overlap, but they go through
// more pointers than the compiler's alias checks cover, and it would leave them scalar. The
// per-sample members that scatter_along_outer calls are C10_ALWAYS_INLINE: a call left in the loop
// keeps it scalar too, and among this file's many instantiations gcc's inliner leaves some out.

// Along the outer axis at row (s, r) (clamped neighbours): S x = [1,2,1] and D x = [-1,0,1],
// into the ring.
template <int NDIM, typename scalar_t, typename acc_t>
void outer_pass(const scalar_t* vol, const Frame<NDIM>& f, int s, int r, Scratch<NDIM, acc_t>& sc) {
  const scalar_t* a = vol + f.row_offset(clamp_index(s - 1, f.outer), r);
  const scalar_t* b = vol + f.row_offset(s, r);
  const scalar_t* c = vol + f.row_offset(clamp_index(s + 1, f.outer), r);
  acc_t* smooth = sc.smoothed_along_outer(r);
  acc_t* diff = sc.differentiated_along_outer(r);
#pragma omp simd
  for (int j = 0; j < f.inner; ++j) {
    const acc_t before = static_cast<acc_t>(a[j]), here = static_cast<acc_t>(b[j]), after = static_cast<acc_t>(c[j]);
    smooth[j] = before + 2 * here + after;
    diff[j] = after - before;
  }
}

// The inputs of the pass along row (s, r), padded, with ghost samples that replicate the row's
// ends: across the rows (3D; clamped neighbours), S of the outer pass's D x feeds the outer
// derivative, D of its S x the middle one and S of its S x the inner one. In 2D there are no
// neighbouring rows: the outer pass is the input as it is, and the middle row stays 0. Rows are
// taken in order; row r + 1 of the outer pass is computed on row r's turn.
template <int NDIM, typename scalar_t, typename acc_t>
Rows<acc_t> derivative_inputs(const scalar_t* vol, const Frame<NDIM>& f, int s, int r, Scratch<NDIM, acc_t>& sc) {
  if (r == 0) outer_pass(vol, f, s, 0, sc);
  if (r + 1 < f.middle) outer_pass(vol, f, s, r + 1, sc);
  const Rows<acc_t> in{sc.padded_row(0), sc.padded_row(1), sc.padded_row(2)};
  const int W = f.inner;
  if (NDIM == 2) {
    std::copy(sc.differentiated_along_outer(r), sc.differentiated_along_outer(r) + W, in.outer);
    std::copy(sc.smoothed_along_outer(r), sc.smoothed_along_outer(r) + W, in.inner);
  } else {
    const int up = clamp_index(r - 1, f.middle), down = clamp_index(r + 1, f.middle);
    const acc_t *s0 = sc.smoothed_along_outer(up), *s1 = sc.smoothed_along_outer(r), *s2 = sc.smoothed_along_outer(down);
    const acc_t *d0 = sc.differentiated_along_outer(up), *d1 = sc.differentiated_along_outer(r),
                *d2 = sc.differentiated_along_outer(down);
#pragma omp simd
    for (int j = 0; j < W; ++j) {
      in.outer[j] = d0[j] + 2 * d1[j] + d2[j];
      in.middle[j] = s2[j] - s0[j];
      in.inner[j] = s0[j] + 2 * s1[j] + s2[j];
    }
  }
  for (acc_t* row : {in.outer, in.middle, in.inner}) {
    row[-1] = row[0];
    row[W] = row[W - 1];
  }
  return in;
}

// Along the row at sample j: the derivatives before their normalization, kernel_norm * g_d.
template <int NDIM, typename acc_t>
inline Triple<acc_t> derivatives_at(const Rows<acc_t>& in, int j) {
  Triple<acc_t> raw;
  raw.outer = in.outer[j - 1] + 2 * in.outer[j] + in.outer[j + 1];
  raw.middle = NDIM == 3 ? in.middle[j - 1] + 2 * in.middle[j] + in.middle[j + 1] : acc_t(0);
  raw.inner = in.inner[j + 1] - in.inner[j - 1];
  return raw;
}

// 1 / kernel_norm^2, which normalizes the derivatives where they meet, once per sample:
// sum_d g_d^2 = (sum_d raw_d^2) / norm^2, and v_d times the normalization of the adjoint that
// follows is (alpha / norm^2) * grad_y * raw_d / m. A power of two: exact, so the result is the
// same as with g_d normalized one by one.
template <int NDIM, typename acc_t>
constexpr acc_t inverse_norm_squared() {
  return acc_t(1) / (acc_t(kernel_norm(NDIM)) * acc_t(kernel_norm(NDIM)));
}

template <typename acc_t>
inline acc_t sum_of_squares(const Triple<acc_t>& g) {
  return g.outer * g.outer + g.middle * g.middle + g.inner * g.inner;
}

// Planes [begin, end) of a volume's outputs (`residual`: the op, else its magnitude form).
template <int NDIM, typename scalar_t>
void forward_slabs(const scalar_t* x, scalar_t* y, at::opmath_type<scalar_t> alpha, at::opmath_type<scalar_t> eps,
                   bool residual, const Frame<NDIM>& f, Scratch<NDIM, at::opmath_type<scalar_t>>& sc, int begin,
                   int end) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t inv2 = inverse_norm_squared<NDIM, acc_t>();
  for (int s = begin; s < end; ++s) {
    for (int r = 0; r < f.middle; ++r) {
      const Rows<acc_t> in = derivative_inputs(x, f, s, r, sc);
      const scalar_t* xr = x + f.row_offset(s, r);
      scalar_t* yr = y + f.row_offset(s, r);
#pragma omp simd
      for (int j = 0; j < f.inner; ++j) {  // the pass along the row, fused with the output
        const acc_t m = edge_magnitude(sum_of_squares(derivatives_at<NDIM>(in, j)) * inv2, eps);
        yr[j] = static_cast<scalar_t>(edge_output(static_cast<acc_t>(xr[j]), alpha, m, residual));
      }
    }
  }
}

// v_d = alpha * grad_y * g_d / m along a row, times the normalization 1/8 or 1/32 of the adjoint
// that follows, into the padded rows `v` (2D: no middle one); returns the row's sum(grad_y * m).
// The sum runs in the vector lanes and adds them up in an order fixed at compile time: the same
// on every run and for any number of threads.
template <int NDIM, typename scalar_t, typename acc_t>
acc_t adjoint_inputs_row(const Rows<acc_t>& in, const scalar_t* grad_y, acc_t alpha, acc_t eps, int W, Rows<acc_t> v) {
  const acc_t inv2 = inverse_norm_squared<NDIM, acc_t>(), gain = alpha * inv2;
  acc_t sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < W; ++j) {
    const Triple<acc_t> raw = derivatives_at<NDIM>(in, j);
    const acc_t m = edge_magnitude(sum_of_squares(raw) * inv2, eps);
    const acc_t grad = static_cast<acc_t>(grad_y[j]);
    const acc_t scale = adjoint_scale(gain, grad, m);
    v.outer[j] = scale * raw.outer;
    if (NDIM == 3) v.middle[j] = scale * raw.middle;
    v.inner[j] = scale * raw.inner;
    sum += grad * m;
  }
  return sum;
}

// Ghost samples that make row_adjoint_at the clamped adjoint of docs/edge-op.md with no branch:
// a ghost u[-1] = u[0] gives [1,2,1]^T its border sum 3 u[0] + u[1], a ghost u[-1] = -u[0] gives
// [-1,0,1]^T its -u[0] - u[1]; mirrored at the far end, and both give 4 u[0] and 0 on a row of
// one sample.
template <typename acc_t>
void set_adjoint_ghosts(Rows<acc_t> v, int W) {
  for (acc_t* u : {v.outer, v.middle}) {
    u[-1] = u[0];
    u[W] = u[W - 1];
  }
  v.inner[-1] = -v.inner[0];
  v.inner[W] = -v.inner[W - 1];
}

// The adjoint along the row at sample j of the padded rows v: [1,2,1]^T of the outer and middle
// v_d, [-1,0,1]^T of the inner one.
template <int NDIM, typename acc_t>
inline Triple<acc_t> row_adjoint_at(const Rows<acc_t>& v, int j) {
  return {v.outer[j - 1] + 2 * v.outer[j] + v.outer[j + 1],
          NDIM == 3 ? v.middle[j - 1] + 2 * v.middle[j] + v.middle[j + 1] : acc_t(0), v.inner[j - 1] - v.inner[j + 1]};
}

// 3D: the padded rows v adjoined along the row, into `out`.
template <typename acc_t>
void row_adjoint(const Rows<acc_t>& v, int W, Rows<acc_t> out) {
#pragma omp simd
  for (int j = 0; j < W; ++j) {
    const Triple<acc_t> a = row_adjoint_at<3>(v, j);
    out.outer[j] = a.outer;
    out.middle[j] = a.middle;
    out.inner[j] = a.inner;
  }
}

// What the adjoint along the outer axis applies to, at one sample: P to [-1,0,1]^T, Q to
// [1,2,1]^T.
template <typename acc_t>
struct OuterInputs {
  acc_t P, Q;
};

// 3D: P and Q at row q, across the rows from the row-adjoined v_d of rows q-1, q, q+1:
// [1,2,1]^T of the outer one is P; [-1,0,1]^T of the middle one plus [1,2,1]^T of the inner one
// is Q. Past an end of the axis a ghost row stands in (ghost_row).
template <typename acc_t>
struct AcrossRows {
  Rows<acc_t> up, here, down;

  C10_ALWAYS_INLINE OuterInputs<acc_t> at(int j) const {
    return {up.outer[j] + 2 * here.outer[j] + down.outer[j],
            up.middle[j] - down.middle[j] + up.inner[j] + 2 * here.inner[j] + down.inner[j]};
  }
};

// The row past an end of the middle axis, beside the end row: like the ghost samples of
// set_adjoint_ghosts, a copy of it for [1,2,1]^T (the outer and inner v_d) and its negative for
// [-1,0,1]^T (the middle one, into `negated_middle`) make AcrossRows the clamped adjoint.
template <typename acc_t>
Rows<acc_t> ghost_row(const Rows<acc_t>& end, acc_t* negated_middle, int W) {
#pragma omp simd
  for (int j = 0; j < W; ++j) negated_middle[j] = -end.middle[j];
  return {end.outer, negated_middle, end.inner};
}

// 2D: P and Q along a row, a plane of its own: the row adjoint of the padded rows v.
template <typename acc_t>
struct RowAdjoint {
  Rows<acc_t> v;

  C10_ALWAYS_INLINE OuterInputs<acc_t> at(int j) const {
    const Triple<acc_t> a = row_adjoint_at<2>(v, j);
    return {a.outer, a.inner};
  }
};

// Row q of the planes that the adjoint along the outer axis of plane s reaches: grad_x at plane
// s - 1, which plane s completes, and the running sums of planes s and s + 1; plane s + 1's sum
// starts in the slot that plane s - 1's leaves.
template <typename scalar_t, typename acc_t>
struct OuterTargets {
  const scalar_t* grad_y_before;
  scalar_t* grad_x_before;
  acc_t* sum_here;
  acc_t* sum_before_then_after;
  bool residual;  // grad_x holds grad_y's identity term (the op, not its magnitude form)
};

// What plane s's P and Q add to planes s-1, s and s+1 under the adjoint along the outer axis.
template <typename acc_t>
struct OuterShares {
  acc_t before, here, after;
};

// Inside the axis: [-1,0,1]^T of P and [1,2,1]^T of Q as they read.
template <typename acc_t>
struct InteriorSplit {
  C10_ALWAYS_INLINE OuterShares<acc_t> operator()(acc_t P, acc_t Q) const { return {Q - P, 2 * Q, Q + P}; }
};

// At plane 0 and the last (of n), with the clamped weights of docs/edge-op.md: the taps clamped
// onto the end plane add up there, and nothing goes to a plane outside the axis. A ghost plane
// would not do: the running sums have no slot for the plane before the first.
template <typename acc_t>
struct ClampedSplit {
  acc_t diff[3], smooth[3];  // towards planes s-1, s, s+1

  ClampedSplit(int s, int n) {
    for (int k = 0; k < 3; ++k) {
      const int target = s + k - 1;
      const bool inside = target >= 0 && target < n;
      diff[k] = inside ? adjoint_tap(kDeriv, s, target, n) : 0.0f;
      smooth[k] = inside ? adjoint_tap(kSmooth, s, target, n) : 0.0f;
    }
  }
  C10_ALWAYS_INLINE OuterShares<acc_t> operator()(acc_t P, acc_t Q) const {
    return {diff[0] * P + smooth[0] * Q, diff[1] * P + smooth[1] * Q, diff[2] * P + smooth[2] * Q};
  }
};

// The adjoint along the outer axis, scattered, for one row: plane s's P and Q, split among planes
// s-1, s and s+1. grad_x at plane s - 1 is written where it is this range's to complete. Inputs
// and split are copies: the compiler keeps what they hold in registers only when no store can
// reach it.
template <bool kCompletesBefore, typename scalar_t, typename acc_t, typename Inputs, typename Split>
void scatter_along_outer(const Inputs inputs, const Split split, int W, const OuterTargets<scalar_t, acc_t>& t) {
#pragma omp simd
  for (int j = 0; j < W; ++j) {
    const OuterInputs<acc_t> in = inputs.at(j);
    const OuterShares<acc_t> share = split(in.P, in.Q);
    if (kCompletesBefore) {
      const acc_t adjoint = t.sum_before_then_after[j] + share.before;
      t.grad_x_before[j] = static_cast<scalar_t>(identity_term(t.residual, static_cast<acc_t>(t.grad_y_before[j])) + adjoint);
    }
    t.sum_here[j] += share.here;
    t.sum_before_then_after[j] = share.after;
  }
}

// The loop above for plane s of n, for the case at hand: inside the axis or at one of its ends,
// completing the plane before or not.
template <typename scalar_t, typename acc_t, typename Inputs>
void scatter_along_outer(const Inputs& inputs, int s, int n, bool completes_before, int W,
                         const OuterTargets<scalar_t, acc_t>& t) {
  const auto with = [&](const auto& split) {
    if (completes_before) scatter_along_outer<true>(inputs, split, W, t);
    else scatter_along_outer<false>(inputs, split, W, t);
  };
  if (s > 0 && s < n - 1) with(InteriorSplit<acc_t>{});
  else with(ClampedSplit<acc_t>(s, n));
}

// A volume's backward pass: its inputs, its output and its constants.
template <typename scalar_t>
struct BackwardVolume {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* grad_y;
  const scalar_t* x;
  scalar_t* grad_x;
  acc_t alpha, eps;
  bool residual;  // the op, else its magnitude form
};

// One plane of the backward march: v_d row by row, adjoined along the row, across the rows (3D)
// and, scattered, along the outer axis; with row q of plane s, row q of grad_x at plane s - 1 is
// complete (written if `completes_before`). Returns plane s's share of grad_alpha. Row q's
// adjoint across the rows is complete once the row-adjoined v_d of row q + 1 is in.
template <int NDIM, typename scalar_t>
double backward_plane(const BackwardVolume<scalar_t>& vol, const Frame<NDIM>& f, int s, bool completes_before,
                      Scratch<NDIM, at::opmath_type<scalar_t>>& sc) {
  using acc_t = at::opmath_type<scalar_t>;
  const Rows<acc_t> v{sc.padded_row(3), sc.padded_row(4), sc.padded_row(5)};
  auto targets = [&](int q) {
    const int64_t row = int64_t(q) * f.inner;
    const int64_t before = f.row_offset(std::max(s - 1, 0), q);  // plane 0 completes no plane before it
    return OuterTargets<scalar_t, acc_t>{vol.grad_y + before, vol.grad_x + before, sc.outer_sum(s) + row,
                                         sc.outer_sum(s + 1) + row, vol.residual};
  };
  auto row_complete = [&](int q) {
    const Rows<acc_t> here = sc.adjoined_row(q);
    const bool at_an_end = q == 0 || q == f.middle - 1;
    const Rows<acc_t> ghost = at_an_end ? ghost_row(here, sc.ghost_middle.data(), f.inner) : Rows<acc_t>{};
    const AcrossRows<acc_t> across{q > 0 ? sc.adjoined_row(q - 1) : ghost, here,
                                   q + 1 < f.middle ? sc.adjoined_row(q + 1) : ghost};
    scatter_along_outer(across, s, f.outer, completes_before, f.inner, targets(q));
  };
  double share = 0;
  for (int r = 0; r < f.middle; ++r) {
    const Rows<acc_t> in = derivative_inputs(vol.x, f, s, r, sc);
    share += adjoint_inputs_row<NDIM>(in, vol.grad_y + f.row_offset(s, r), vol.alpha, vol.eps, f.inner, v);
    set_adjoint_ghosts(v, f.inner);
    if constexpr (NDIM == 2) {
      scatter_along_outer(RowAdjoint<acc_t>{v}, s, f.outer, completes_before, f.inner, targets(0));
    } else {
      row_adjoint(v, f.inner, sc.adjoined_row(r));
      if (r > 0) row_complete(r - 1);
      if (r == f.middle - 1) row_complete(r);
    }
  }
  return share;
}

// grad_x at the last plane: its sum is complete once the plane itself is in (nothing comes
// after it).
template <int NDIM, typename scalar_t>
void finish_last_plane(const BackwardVolume<scalar_t>& vol, const Frame<NDIM>& f,
                       Scratch<NDIM, at::opmath_type<scalar_t>>& sc) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t start = f.row_offset(f.outer - 1, 0);
  const acc_t* sum = sc.outer_sum(f.outer - 1);
#pragma omp simd
  for (int64_t i = 0; i < f.plane(); ++i)
    vol.grad_x[start + i] = static_cast<scalar_t>(identity_term(vol.residual, static_cast<acc_t>(vol.grad_y[start + i])) + sum[i]);
}

// grad_x at planes [begin, end) of a volume; returns their share of grad_alpha. One pass over
// the planes: grad_x at plane p is complete once plane p + 1 is in (the last plane once it is
// in itself). The adjoint reaches one plane to each side, so the planes from begin - 1 to end
// are marched (those outside the range add nothing to the share). The first one's sum starts
// at 0: nothing comes before plane 0, and a range never completes the plane before it.
template <int NDIM, typename scalar_t>
double backward_slabs(const BackwardVolume<scalar_t>& vol, const Frame<NDIM>& f,
                      Scratch<NDIM, at::opmath_type<scalar_t>>& sc, int begin, int end) {
  const int first = std::max(begin - 1, 0), last = std::min(end, f.outer - 1);
  std::fill_n(sc.outer_sum(first), f.plane(), 0);
  double total = 0;
  for (int s = first; s <= last; ++s) {
    const double share = backward_plane(vol, f, s, s > begin, sc);
    if (s >= begin && s < end) total += share;
  }
  if (end == f.outer) finish_last_plane(vol, f, sc);
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

// The op (`residual`) or its magnitude form, for a checked call.
at::Tensor forward_cpu(const ForwardCall& call, double eps, bool residual) {
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
                                                             static_cast<acc_t>(eps), residual, f, sc, begin, end);
                                       });
    };
    if (x.dim() == 4) run(std::integral_constant<int, 2>{});
    else run(std::integral_constant<int, 3>{});
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> backward_cpu(const BackwardCall& call, double eps, bool residual) {
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
                                         const BackwardVolume<scalar_t> vol{gp + off, xp + off, gxp + off,
                                                                            static_cast<acc_t>(ap[p % e.channels]),
                                                                            static_cast<acc_t>(eps), residual};
                                         partial[item] = backward_slabs(vol, f, sc, begin, end);
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

void check_cpu_input(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.device().is_cpu(), op, " (CPU kernel): x must be a CPU tensor, got ", x.device());
}

at::Tensor edge_enhance_cpu(const at::Tensor& x, const at::Tensor& alpha, double eps) {
  check_cpu_input(x, "edge_enhance");
  return forward_cpu(ForwardCall(x, alpha, eps), eps, true);
}

std::tuple<at::Tensor, at::Tensor> edge_enhance_backward_cpu(const at::Tensor& grad_y, const at::Tensor& x,
                                                             const at::Tensor& alpha, double eps) {
  check_cpu_input(x, "edge_enhance_backward");
  return backward_cpu(BackwardCall(grad_y, x, alpha, eps), eps, true);
}

at::Tensor edge_magnitude_cpu(const at::Tensor& x, double eps) {
  check_cpu_input(x, "edge_magnitude");
  return forward_cpu(ForwardCall::magnitude(x, eps), eps, false);
}

at::Tensor edge_magnitude_backward_cpu(const at::Tensor& grad_m, const at::Tensor& x, double eps) {
  check_cpu_input(x, "edge_magnitude_backward");
  return std::get<0>(backward_cpu(BackwardCall::magnitude(grad_m, x, eps), eps, false));
}

}  // namespace
}  // namespace segnet

TORCH_LIBRARY_IMPL(segnet_ops, CPU, m) {
  m.impl("edge_enhance", &segnet::edge_enhance_cpu);
  m.impl("edge_enhance_backward", &segnet::edge_enhance_backward_cpu);
  m.impl("edge_magnitude", &segnet::edge_magnitude_cpu);
  m.impl("edge_magnitude_backward", &segnet::edge_magnitude_backward_cpu);
}
