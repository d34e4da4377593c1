// Forward pass of the marching kernel: y = x + alpha * m (or m, the magnitude form, where alpha = 1
// and `residual` is false), one plane per step.
//
// With the normalization folded in (N = 8 in 2D, 32 in 3D; both powers of two, so folding is
// exact): m = sqrt(sum_d (g_d / N)^2 + eps) = sqrt(sum_d g_d^2 + N^2 eps) / N for the raw g_d.
#pragma once

#include "window.h"

namespace segnet {

template <int NDIM, typename scalar_t, typename acc_t, bool VECTOR>
struct ForwardLane : MarchLane<NDIM, Pass::kForward, scalar_t, acc_t, VECTOR> {
  using Base = MarchLane<NDIM, Pass::kForward, scalar_t, acc_t, VECTOR>;
  using Base::S;
  scalar_t* y;
  bool residual;      // the op, else its magnitude form
  acc_t x_centre[S];  // the lane's own row of the plane whose output is next

  SEGNET_HD ForwardLane(const MarchGeometry& g, const LaneSite& s, const scalar_t* x_all, scalar_t* y_all,
                        scalar_t* staging, acc_t alpha, acc_t eps_times_norm2, bool residual)
      : Base(g, s, x_all, staging, alpha, eps_times_norm2), y(y_all + s.plane * g.volume()), residual(residual) {}

  SEGNET_HD void keep_centre() {
#pragma unroll
    for (int i = 0; i < S; ++i) x_centre[i] = this->rows[Base::R / 2][i];
  }

  // y at plane p (the window's derivatives), then remember plane p + 1's own row.
  SEGNET_HD void emit(int p) {
    if (this->site.owns) {
      acc_t out[S];
#pragma unroll
      for (int i = 0; i < S; ++i) {
        out[i] = identity_term(residual, x_centre[i]) + this->alpha_over_norm * fast_sqrt(this->window.sum_of_squares(i) + this->eps_times_norm2);
      }
      store_strip<VECTOR>(y + this->plane_offset(p) + this->row_offset[Base::R / 2], this->site.w0, this->inner, out);
    }
    keep_centre();
  }
};

// One unit's outputs at planes [begin, end): the window is primed with planes begin - 1 and
// begin, then each step brings in plane p + 1 and writes plane p. Plane q sits in ring slot
// (q - begin + 1) % kRing, so the loop takes kRing steps per iteration, one per slot (the window
// also slides by renaming registers, not moving them).
template <int NDIM, class Group>
SEGNET_HD void forward_march(Group& group, int begin, int end) {
  start_ring(group, begin - 1);
  const auto prime = [&](auto slot, int q) {
    arrive_plane<NDIM>(group, slot, q);
    group.each([&](auto& lane) {
      lane.ahead.commit();
      lane.keep_centre();
    });
  };
  prime(Slot<0>{}, begin - 1);
  prime(Slot<1>{}, begin);
  const auto step = [&](auto slot, int p) {
    arrive_plane<NDIM>(group, slot, p + 1);
    group.each([&](auto& lane) {
      lane.ahead.commit();
      lane.emit(p);
    });
  };
  march_in_rounds<Group::kRing, kPrimedPlanes % Group::kRing>(begin, end - 1, step);
  group.each([&](auto& lane) { lane.ahead.drain(); });
}

}  // namespace segnet
