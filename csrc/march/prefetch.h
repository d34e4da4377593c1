// Where a lane's rows wait between their load and their use. The march loads the rows of plane
// q + kRing when plane q arrives (kRing planes ahead: ring_slots(), geometry.h), into the ring
// slot plane q just left; the slot is named at compile time (Slot<0>, Slot<1>, ...), and the
// loop takes one step per slot.
//
// Whole-vector strips go to shared memory by asynchronous copies (cp.async): nothing reads them
// until the explicit wait before their plane arrives, so the copies overlap kRing - 1 steps of
// work whatever the compiler schedules. (Loaded into registers, the compiler moved each vector
// into the registers the loop keeps it in right after the load, which waits for the load: no
// prefetch at all.) Each step closes one group of copies, and the wait before a plane arrives
// leaves the later steps' groups in flight.
//
// The general form (clamped sample loads) keeps its strips in a ring of registers.
//
// On the host the copies are emulated as the GPU may perform them: late. A copy writes NaN into
// its slot at once and the data only when a wait covers its group, so reading a slot before the
// wait reads NaN, as reading before the copy lands could on the GPU. GPUs without cp.async (7.5)
// load plain (strip.h): their data is in the slot when the load returns, which the emulation
// does when copies_land_when_issued is set (emulation.cpp: SEGNET_EMULATED_ARCH=7.5).
#pragma once

#include <type_traits>
#include <utility>

#if !defined(__CUDA_ARCH__)
#include <cstring>
#include <limits>
#include <vector>
#endif

#include "geometry.h"
#include "strip.h"

namespace segnet {

template <int SLOT>
using Slot = std::integral_constant<int, SLOT>;

#if !defined(__CUDA_ARCH__)
inline bool copies_land_when_issued = false;
#endif

template <int RING, int FIRST, class F, int... K>
SEGNET_HD void for_slots(F& f, std::integer_sequence<int, K...>) {
  (f(Slot<(FIRST + K) % RING>{}, K), ...);
}

// f(slot, k) for k = 0 .. COUNT - 1 in order, the slot FIRST + k (modulo RING) named at compile time.
template <int RING, int FIRST, int COUNT = RING, class F>
SEGNET_HD void for_each_slot(F&& f) {
  for_slots<RING, FIRST>(f, std::make_integer_sequence<int, COUNT>{});
}

// ROWS rows per plane, each a strip of S samples, in a ring of RING slots.
template <bool VECTOR, int RING, int ROWS, int S, typename scalar_t>
struct Prefetch;

template <int RING, int ROWS, int S, typename scalar_t>
struct Prefetch<true, RING, ROWS, S, scalar_t> {
  static constexpr int kRing = RING;
  scalar_t* strips;  // this lane's strip of (slot 0, row 0); the lanes of a warp lie side by side
#if !defined(__CUDA_ARCH__)
  struct Copy {
    scalar_t* to;
    const scalar_t* from;
  };
  std::vector<std::vector<Copy>> groups{{}};  // oldest first; the last one still open
#endif

  SEGNET_HD scalar_t* slot(int s, int row) const { return strips + (s * ROWS + row) * kWarpLanes * S; }

  template <int SLOT>
  SEGNET_HD void load(Slot<SLOT>, int row, const scalar_t* from_row, int w0, int n) {
#if defined(__CUDA_ARCH__)
    copy_strip_async<S>(from_row, w0, n, slot(SLOT, row));
#else
    scalar_t* to = slot(SLOT, row);
    if (copies_land_when_issued) {
      std::memcpy(to, vector_strip<S>(from_row, w0, n), S * sizeof(scalar_t));
      return;
    }
    for (int i = 0; i < S; ++i) to[i] = std::numeric_limits<scalar_t>::quiet_NaN();
    groups.back().push_back({to, vector_strip<S>(from_row, w0, n)});
#endif
  }
  SEGNET_HD void commit() {
#if defined(__CUDA_ARCH__)
    commit_copies();
#else
    groups.emplace_back();
#endif
  }
  // Before plane q's rows are read: the copies of every step but the last have landed.
  SEGNET_HD void wait() {
#if defined(__CUDA_ARCH__)
    wait_for_copies<kRing - 1>();
#else
    while (groups.size() > kRing) {  // the open group and kRing - 1 closed ones may stay in flight
      for (const Copy& c : groups.front()) std::memcpy(c.to, c.from, S * sizeof(scalar_t));
      groups.erase(groups.begin());
    }
#endif
  }
  template <int SLOT, typename acc_t>
  SEGNET_HD void take(Slot<SLOT>, int row, acc_t (&out)[S]) const {
    widen_staged<S>(slot(SLOT, row), out);
  }
  // At the march's end: the loads beyond it must land before the thread leaves, or they could
  // write into the shared memory of the next block the SM starts.
  SEGNET_HD void drain() {
#if defined(__CUDA_ARCH__)
    commit_copies();
    wait_for_copies<0>();
#else
    groups.assign(1, {});  // nothing reads them
#endif
  }
};

template <int RING, int ROWS, int S, typename scalar_t>
struct Prefetch<false, RING, ROWS, S, scalar_t> {
  static constexpr int kRing = RING;
  LoadedStrip<S, scalar_t> ring[kRing][ROWS];

  template <int SLOT>
  SEGNET_HD void load(Slot<SLOT>, int row, const scalar_t* from_row, int w0, int n) {
    load_strip(from_row, w0, n, ring[SLOT][row]);
  }
  SEGNET_HD void commit() {}
  SEGNET_HD void wait() {}
  SEGNET_HD void drain() {}
  template <int SLOT, typename acc_t>
  SEGNET_HD void take(Slot<SLOT>, int row, acc_t (&out)[S]) const {
    widen(ring[SLOT][row].samples, out);
  }
};

}  // namespace segnet
