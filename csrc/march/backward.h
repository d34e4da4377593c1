// Backward pass of the marching kernel, in the forward pass's window.
//
// With r = 1 / sqrt(sum_d g_d^2 + N^2 eps) for the raw derivatives g_d (see forward.h):
//     v_d = alpha * grad_y * g_d * r / N                 (the op's v_d, with the adjoint's 1/N folded in)
//     grad_alpha = sum grad_y * sqrt(sum_d g_d^2 + N^2 eps) / N
//     grad_x = grad_y + sum_d K_d^T v_d,   K_d^T separable like K_d
// (the magnitude form: alpha = 1 and no grad_y term in grad_x, where `residual` is false).
// Each clamped 3-tap adjoint is the interior formula (S^T u = u[-1] + 2 u + u[+1],
// D^T u = u[-1] - u[+1]) with one ghost sample past each end: a copy of the end sample for S^T,
// its negative for D^T (this reproduces the folded border taps of docs/edge-op.md,
// including axes of length 1). The adjoint runs axis by axis in the reverse order of the
// forward pass:
//     along the strip:        u_outer = S_W^T v_outer,  u_middle = S_W^T v_middle,  u_inner = D_W^T v_inner
//     across rows (3D only):  P = S_M^T u_outer,  Q = D_M^T u_middle + S_M^T u_inner   (2D: P = u_outer, Q = u_inner)
//     along the march:        grad_x[p] = grad_y[p] + P[p-1] - P[p+1] + Q[p-1] + 2 Q[p] + Q[p+1]
// A step computes v, P and Q at plane p and completes grad_x at plane p - 1, so grad_y is read
// once and x once (plus the halo). In 3D the rows above and below a lane belong to other warps:
// a unit is backward_rows() + 2 warps on consecutive rows, which trade u through shared memory.
#pragma once

#include "window.h"

namespace segnet {

template <int NDIM, typename scalar_t, typename acc_t, bool VECTOR>
struct BackwardLane : MarchLane<NDIM, Pass::kBackward, scalar_t, acc_t, VECTOR> {
  using Base = MarchLane<NDIM, Pass::kBackward, scalar_t, acc_t, VECTOR>;
  using Base::S;
  static constexpr int kCentre = Base::R / 2;
  const scalar_t* grad_y;
  scalar_t* grad_x;
  bool residual;  // the op, else its magnitude form
  acc_t gy[S];
  acc_t v_outer[S]{}, v_middle[S]{}, v_inner[S]{};  // v_middle stays 0 in 2D
  acc_t u_outer[S], u_middle[S], u_inner[S];
  acc_t p_now[S], q_now[S], p_before[S], q_before[S];
  acc_t pending[S];  // grad_x at plane p - 1 but for its P[p] and Q[p] terms

  SEGNET_HD BackwardLane(const MarchGeometry& g, const LaneSite& s, const scalar_t* grad_y_all,
                         const scalar_t* x_all, scalar_t* grad_x_all, scalar_t* staging, acc_t alpha,
                         acc_t eps_times_norm2, bool residual)
      : Base(g, s, x_all, staging, alpha, eps_times_norm2), grad_y(grad_y_all + s.plane * g.volume()),
        grad_x(grad_x_all + s.plane * g.volume()), residual(residual) {}

  SEGNET_HD const scalar_t* own_row(const scalar_t* vol, int q) const {
    return vol + this->plane_offset(q) + this->row_offset[kCentre];
  }
  // grad_y's plane q into slot SLOT, beside x's rows (one group of loads per step, window.h).
  template <int SLOT>
  SEGNET_HD void fetch_grad(Slot<SLOT> slot, int q) {
    this->ahead.load(slot, Base::R, own_row(grad_y, q), this->site.w0, this->inner);
  }
  // At the march's start, beside x's plane q: grad_y's plane q - 1, taken with it (start_ring).
  template <int SLOT>
  SEGNET_HD void fetch_extra(Slot<SLOT> slot, int q) {
    fetch_grad(slot, q - 1);
  }

  // v_d at plane p from the window, and the lane's share of grad_alpha where it owns plane p.
  template <int SLOT>
  SEGNET_HD void adjoint_inputs(Slot<SLOT> slot, int p, bool owned_plane) {
    this->ahead.take(slot, Base::R, gy);
    const auto& w = this->window;
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const acc_t s = w.sum_of_squares(i) + this->eps_times_norm2;
      const acc_t scale = this->alpha_over_norm * gy[i] * fast_rsqrt(s);
      v_outer[i] = scale * w.g_outer[i];
      v_inner[i] = scale * w.g_inner[i];
      if (NDIM == 3) v_middle[i] = scale * w.g_middle[i];
      if (owned_plane && this->site.owns && (VECTOR || this->site.w0 + i < this->inner)) {
        this->part += gy[i] * fast_sqrt(s);
      }
    }
    Halo<acc_t>& h = this->halo;
    h.first[0] = v_outer[0], h.last[0] = v_outer[S - 1];
    h.first[1] = v_inner[0], h.last[1] = v_inner[S - 1];
    if (NDIM == 3) h.first[2] = v_middle[0], h.last[2] = v_middle[S - 1];
  }

  // The warp's share of grad_alpha, after backward_march.
  SEGNET_HD acc_t grad_alpha_share() const { return this->part / this->kNorm; }

  // Samples past the row end hold the ghost of its last sample (a strip that is not whole).
  SEGNET_HD void ghost_past_row_end() {
#pragma unroll
    for (int i = 1; i < S; ++i) {
      if (this->site.w0 + i >= this->inner) {
        v_outer[i] = v_outer[i - 1];
        v_middle[i] = v_middle[i - 1];
        v_inner[i] = -v_inner[i - 1];
      }
    }
  }

  // The adjoint along the strip, with the neighbours' samples and the ghosts at the row ends.
  SEGNET_HD void inner_adjoint() {
    if (!VECTOR) ghost_past_row_end();
    const Halo<acc_t>& h = this->halo;
    const bool first = this->row_start, last = this->row_end;
    const acc_t o_left = first ? v_outer[0] : h.left[0], o_right = last ? v_outer[S - 1] : h.right[0];
    const acc_t i_left = first ? -v_inner[0] : h.left[1], i_right = last ? -v_inner[S - 1] : h.right[1];
    const acc_t m_left = first ? v_middle[0] : h.left[2], m_right = last ? v_middle[S - 1] : h.right[2];
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const acc_t ol = i == 0 ? o_left : v_outer[i - 1], orr = i == S - 1 ? o_right : v_outer[i + 1];
      const acc_t il = i == 0 ? i_left : v_inner[i - 1], ir = i == S - 1 ? i_right : v_inner[i + 1];
      u_outer[i] = ol + 2 * v_outer[i] + orr;
      u_inner[i] = il - ir;
      if (NDIM == 3) {
        const acc_t ml = i == 0 ? m_left : v_middle[i - 1], mr = i == S - 1 ? m_right : v_middle[i + 1];
        u_middle[i] = ml + 2 * v_middle[i] + mr;
      } else {
        p_now[i] = u_outer[i];
        q_now[i] = u_inner[i];
      }
    }
  }

  // 3D: what the rows above and below need of this lane's row. Across rows the adjoint is
  //     P[r] = u_outer[r-1] + 2 u_outer[r] + u_outer[r+1]
  //     Q[r] = (u_middle[r-1] - u_middle[r+1]) + (u_inner[r-1] + 2 u_inner[r] + u_inner[r+1])
  //          = down[r-1] + 2 u_inner[r] + up[r+1],   down = u_inner + u_middle, up = u_inner - u_middle,
  // so a row shares u_outer, down (for the row below it) and up (for the row above): four reads
  // of shared memory per sample instead of six. A warp on a row outside the volume marches the
  // nearest row of the volume (window.h), so it holds that row's u: shared as they are, u_outer
  // and u_inner are the ghost samples of S_M^T, and u_middle negated is the ghost of D_M^T
  // (docs/edge-op.md). The rows next to the volume's ends need no case of their own.
  SEGNET_HD acc_t& shared_at(acc_t* shared, int warp, int k, int i) const {
    return shared[shared_word(warp, k, i, this->site.lane, S)];
  }
  static constexpr int kOuter = 0, kDown = 1, kUp = 2;  // the shared quantities
  SEGNET_HD void share(acc_t* shared) const {
    const acc_t middle_sign = this->site.ghost_row ? acc_t(-1) : acc_t(1);
#pragma unroll
    for (int i = 0; i < S; ++i) {
      shared_at(shared, this->site.warp, kOuter, i) = u_outer[i];
      shared_at(shared, this->site.warp, kDown, i) = u_inner[i] + middle_sign * u_middle[i];
      shared_at(shared, this->site.warp, kUp, i) = u_inner[i] - middle_sign * u_middle[i];
    }
  }

  // 3D: the adjoint across rows, from the rows above and below.
  SEGNET_HD void middle_adjoint(acc_t* shared, int unit_warps) {
    const int warp = this->site.warp;
    if (warp == 0 || warp == unit_warps - 1) return;  // halo rows: they only supply u
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const acc_t outer_above = shared_at(shared, warp - 1, kOuter, i), outer_below = shared_at(shared, warp + 1, kOuter, i);
      p_now[i] = outer_above + 2 * u_outer[i] + outer_below;
      q_now[i] = shared_at(shared, warp - 1, kDown, i) + 2 * u_inner[i] + shared_at(shared, warp + 1, kUp, i);
    }
  }

  // The adjoint along the march: completes grad_x at plane p - 1 (written if `emit`); at p == 0
  // the ghost plane -1 (P -> -P[0], Q -> Q[0]) starts the sum.
  SEGNET_HD void outer_adjoint(int p, bool emit) {
    acc_t out[S];
#pragma unroll
    for (int i = 0; i < S; ++i) {
      if (p == 0) {
        pending[i] = identity_term(residual, gy[i]) - p_now[i] + 3 * q_now[i];
      } else {
        out[i] = pending[i] + q_now[i] - p_now[i];
        pending[i] = identity_term(residual, gy[i]) + p_before[i] + q_before[i] + 2 * q_now[i];
      }
      p_before[i] = p_now[i];
      q_before[i] = q_now[i];
    }
    if (emit && this->site.owns) store_strip<VECTOR>(grad_x + this->plane_offset(p - 1) + this->row_offset[kCentre], this->site.w0, this->inner, out);
  }

  // grad_x at the last plane, with the ghost plane past it (P -> -P[n-1], Q -> Q[n-1]).
  SEGNET_HD void finish_last_plane() {
    if (!this->site.owns) return;
    acc_t out[S];
#pragma unroll
    for (int i = 0; i < S; ++i) out[i] = pending[i] + q_before[i] + p_before[i];
    store_strip<VECTOR>(grad_x + this->plane_offset(this->outer - 1) + this->row_offset[kCentre], this->site.w0, this->inner, out);
  }
};

// One unit: grad_x at planes [begin, end), and each warp's share of grad_alpha in every lane
// (grad_alpha_share()). v is needed from plane begin - 1 (the adjoint reaches one plane back) to
// end (one forward). The step at plane p takes x's plane p + 1 and grad_y's plane p from ring slot
// (p - first + 2) % kRing and loads x's plane p + 1 + kRing and grad_y's plane p + kRing into it,
// as one group of loads (prefetch.h), so the loop takes kRing steps per iteration, one per slot.
template <int NDIM, class Group>
SEGNET_HD void backward_march(Group& group, int begin, int end, int outer, int unit_warps) {
  const int first = begin > 0 ? begin - 1 : 0, last = end < outer ? end : outer - 1;
  start_ring(group, first - 1);
  const auto prime = [&](auto slot, int q) {
    arrive_plane<NDIM>(group, slot, q);
    group.each([&](auto& lane) {
      lane.fetch_grad(slot, q + Group::kRing - 1);
      lane.ahead.commit();
    });
  };
  prime(Slot<0>{}, first - 1);
  prime(Slot<1>{}, first);
  const auto step = [&](auto slot, int p) {
    arrive_plane<NDIM>(group, slot, p + 1);
    const bool owned = p >= begin && p < end;
    group.each([&](auto& lane) {
      lane.adjoint_inputs(slot, p, owned);
      lane.fetch_grad(slot, p + Group::kRing);
      lane.ahead.commit();
    });
    group.template exchange<NDIM>();
    group.each([&](auto& lane) { lane.inner_adjoint(); });
    if (NDIM == 3) {
      group.each([&](auto& lane) { lane.share(group.shared); });
      group.barrier();
      group.each([&](auto& lane) { lane.middle_adjoint(group.shared, unit_warps); });
      group.barrier();
    }
    const bool emit = p - 1 >= begin;
    group.each([&](auto& lane) { lane.outer_adjoint(p, emit); });
  };
  march_in_rounds<Group::kRing, kPrimedPlanes % Group::kRing>(first, last, step);
  group.each([&](auto& lane) { lane.ahead.drain(); });
  if (end == outer) group.each([&](auto& lane) { lane.finish_last_plane(); });
  group.reduce_warp_sums();
}

}  // namespace segnet
