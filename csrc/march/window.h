// The forward stencil as a window that slides along the outer axis, shared by both passes.
//
// The normalized Sobel derivatives are separable (docs/edge-op.md): along each axis either smoothing S = [1, 2, 1] or difference D = [-1, 0, 1]. When
// plane q arrives, a lane first combines the three rows it read across the middle axis (3D),
// then along its strip with the neighbours' samples at the strip's ends:
//     A = S_W S_M x,   B = D_W S_M x,   C = S_W D_M x                    (2D: S_M = identity)
// and the window turns the last three planes of those into the raw derivatives at plane q - 1:
//     g_outer = A[q] - A[q-2],   g_inner = B[q-2] + 2 B[q-1] + B[q],   g_middle = same with C.
// Raw means without the 1/8 (2D) or 1/32 (3D) normalization, which the passes fold into their
// constants. Rows are read clamped to the volume (the replicate border); along the strip the
// first and last lanes of a row replicate their own end samples.
#pragma once

#include "device_math.h"
#include "geometry.h"
#include "lanes.h"
#include "prefetch.h"
#include "strip.h"

namespace segnet {

template <int NDIM, int S, typename acc_t>
struct SobelWindow {
  acc_t s_mid[S], d_mid[S];                    // the arriving plane after the middle pass: S_M x, D_M x
  acc_t a_before[S], a_now[S];                 // A at planes q-2, q-1
  acc_t b_sum[S], b_now[S], c_sum[S], c_now[S];  // B[q-2] + 2 B[q-1], B[q-1]; the same for C
  acc_t g_outer[S], g_middle[S], g_inner[S];   // raw derivatives at plane q-1

  template <int R>
  SEGNET_HD void middle_pass(const acc_t (&rows)[R][S], Halo<acc_t>& halo) {
#pragma unroll
    for (int i = 0; i < S; ++i) {
      if (NDIM == 3) {
        s_mid[i] = rows[0][i] + 2 * rows[1][i] + rows[2][i];
        d_mid[i] = rows[2][i] - rows[0][i];
      } else {
        s_mid[i] = rows[0][i];
      }
    }
    halo.first[0] = s_mid[0];
    halo.last[0] = s_mid[S - 1];
    halo.first[1] = d_mid[0];
    halo.last[1] = d_mid[S - 1];
  }

  SEGNET_HD void inner_pass(const Halo<acc_t>& halo, bool row_start, bool row_end) {
    const acc_t s_left = row_start ? s_mid[0] : halo.left[0];
    const acc_t s_right = row_end ? s_mid[S - 1] : halo.right[0];
    const acc_t d_left = row_start ? d_mid[0] : halo.left[1];
    const acc_t d_right = row_end ? d_mid[S - 1] : halo.right[1];
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const acc_t sl = i == 0 ? s_left : s_mid[i - 1], sr = i == S - 1 ? s_right : s_mid[i + 1];
      const acc_t a = sl + 2 * s_mid[i] + sr;
      const acc_t b = sr - sl;
      g_outer[i] = a - a_before[i];
      g_inner[i] = b_sum[i] + b;
      a_before[i] = a_now[i];
      a_now[i] = a;
      b_sum[i] = b_now[i] + 2 * b;
      b_now[i] = b;
      if (NDIM == 3) {
        const acc_t dl = i == 0 ? d_left : d_mid[i - 1], dr = i == S - 1 ? d_right : d_mid[i + 1];
        const acc_t c = dl + 2 * d_mid[i] + dr;
        g_middle[i] = c_sum[i] + c;
        c_sum[i] = c_now[i] + 2 * c;
        c_now[i] = c;
      }
    }
  }

  // sum_d g_d^2 at sample i.
  SEGNET_HD acc_t sum_of_squares(int i) const {
    acc_t s = g_outer[i] * g_outer[i] + g_inner[i] * g_inner[i];
    if (NDIM == 3) s += g_middle[i] * g_middle[i];
    return s;
  }
};

// What every lane of both passes holds: where it works, the rows it reads ahead, the window.
template <int NDIM, Pass PASS, typename scalar_t, typename acc_t, bool VECTOR>
struct MarchLane {
  static constexpr int S = strip_width<NDIM, PASS, scalar_t>();
  static constexpr int R = NDIM == 3 ? 3 : 1;  // rows a lane reads per plane (middle axis -1, 0, +1)
  static constexpr int kAheadRows = R + (PASS == Pass::kBackward ? 1 : 0);  // and grad_y's own row
  static constexpr acc_t kNorm = kernel_norm(NDIM);
  static constexpr int kRing = ring_slots(NDIM, PASS, VECTOR);

  LaneSite site;
  int outer, inner;
  int64_t plane_stride;
  int64_t row_offset[R];  // offset of each row the lane reads within a plane
  bool row_start, row_end;  // the strip holds the row's first / last sample
  const scalar_t* x;      // this lane's (n, c) volume
  Prefetch<VECTOR, kRing, kAheadRows, S, scalar_t> ahead;  // the rows of the next kRing planes (prefetch.h)
  acc_t rows[R][S];
  Halo<acc_t> halo{};
  acc_t part;
  SobelWindow<NDIM, S, acc_t> window{};
  acc_t alpha_over_norm, eps_times_norm2;  // the op's constants with the normalization folded in

  // `staging`: the unit's staging slots in shared memory (whole-vector loads only).
  SEGNET_HD MarchLane(const MarchGeometry& g, const LaneSite& s, const scalar_t* x_all, scalar_t* staging,
                       acc_t alpha, acc_t eps_times_norm2)
      : site(s), outer(g.outer), inner(g.inner), plane_stride(int64_t(g.middle) * g.inner),
        alpha_over_norm(alpha / kNorm), eps_times_norm2(eps_times_norm2) {
    if constexpr (VECTOR) ahead.strips = staging + (s.warp * kRing * kAheadRows * kWarpLanes + s.lane) * S;
    const int row = clamp_index(s.row, g.middle);  // a ghost row marches the nearest row (backward.h)
#pragma unroll
    for (int r = 0; r < R; ++r) row_offset[r] = int64_t(clamp_index(row + r - R / 2, g.middle)) * g.inner;
    row_start = s.w0 == 0;
    row_end = s.w0 + S >= g.inner;
    x = x_all + s.plane * g.volume();
    part = acc_t(0);
  }

  SEGNET_HD int64_t plane_offset(int q) const { return int64_t(clamp_index(q, outer)) * plane_stride; }

  // Loads plane q's rows into slot SLOT (the caller closes the step's group of loads).
  template <int SLOT>
  SEGNET_HD void fetch(Slot<SLOT> slot, int q) {
#pragma unroll
    for (int r = 0; r < R; ++r) ahead.load(slot, r, x + plane_offset(q) + row_offset[r], site.w0, inner);
  }

  // Rows the march's start loads beside plane q's (start_ring): none but the backward pass's.
  template <int SLOT>
  SEGNET_HD void fetch_extra(Slot<SLOT>, int) {}

  // Plane q arrives from slot SLOT: its rows widened, plane q + kRing's loads issued into the slot,
  // the rows combined across the middle axis.
  template <int SLOT>
  SEGNET_HD void arrive(Slot<SLOT> slot, int q) {
    ahead.wait();
#pragma unroll
    for (int r = 0; r < R; ++r) ahead.take(slot, r, rows[r]);
    fetch(slot, q + kRing);
    window.middle_pass(rows, halo);
  }
};

// The march's start: planes q .. q + kRing - 1 into ring slots 0 .. kRing - 1, one group of loads
// each. The first kPrimedPlanes are primed (their arrivals produce no output); each later slot also
// takes the lane's extra rows for the step that plane arrives in (lane.fetch_extra: grad_y's
// plane before it in the backward pass, nothing in the forward pass).
template <class Group>
SEGNET_HD void start_ring(Group& group, int q) {
  group.each([&](auto& lane) {
    for_each_slot<Group::kRing, 0>([&](auto slot, int k) {
      lane.fetch(slot, q + k);
      if (k >= kPrimedPlanes) lane.fetch_extra(slot, q + k);
      lane.ahead.commit();
    });
  });
}

// step(slot, p) for p = first .. last, RING per iteration, one per slot: p = first takes slot
// FIRST, each next step the next slot.
template <int RING, int FIRST, class Step>
SEGNET_HD void march_in_rounds(int first, int last, Step&& step) {
  int p = first;
  for (; p + RING - 1 <= last; p += RING) for_each_slot<RING, FIRST>([&](auto slot, int k) { step(slot, p + k); });
  for_each_slot<RING, FIRST, RING - 1>([&](auto slot, int k) {
    if (p + k <= last) step(slot, p + k);
  });
}

// Plane q arrives at every lane of the group from ring slot SLOT: afterwards each window holds
// the raw derivatives at plane q - 1.
template <int NDIM, class Group, int SLOT>
SEGNET_HD void arrive_plane(Group& group, Slot<SLOT> slot, int q) {
  group.each([&](auto& lane) { lane.arrive(slot, q); });
  group.template exchange<NDIM - 1>();
  group.each([&](auto& lane) { lane.window.inner_pass(lane.halo, lane.row_start, lane.row_end); });
}

}  // namespace segnet
