// How the lanes of one unit run the march together. The march (csrc/march/forward.h,
// backward.h) is written once against a lane group with four operations:
//   each(f)            run f on every lane's state (the code between two exchanges),
//   exchange<K>()      every lane receives the last samples of K quantities from the lane before
//                      it and the first samples from the lane after it (a warp shuffle),
//   barrier()          all warps of the unit reach this point (3D backward only),
//   reduce_warp_sums() each warp's lane sums added up, the total in every lane (a butterfly).
// On the GPU, DeviceLanes is one thread: its state lives in registers and the exchanges are
// shuffles. On the host, HostLanes is one warp: it holds the state of its 32 lanes and runs each
// operation for all of them before the next (a warp's lanes run in lockstep, so shuffles are
// emulated exactly); the warps of a unit run as separate fibers that meet at each barrier, in an
// order that changes from barrier to barrier (csrc/cpu/warp_fibers.h), so that a missing barrier
// shows as a wrong result rather than passing by luck of the emulation's order.
#pragma once

#include <functional>

#include "../edge_stencil.h"
#include "geometry.h"

namespace segnet {

// What a lane sends to its neighbours and receives from them, for up to three quantities.
template <typename acc_t>
struct Halo {
  acc_t first[3], last[3];  // sent: this lane's first and last samples
  acc_t left[3], right[3];  // received: the last sample of the lane before, the first of the lane after
};

#if defined(__CUDACC__)
template <class Lane, typename acc_t>
struct DeviceLanes {
  using acc_type = acc_t;
  static constexpr int kRing = Lane::kRing;
  Lane& lane;
  acc_t* shared;

  template <class F>
  __device__ __forceinline__ void each(F&& f) {
    f(lane);
  }
  template <int K>
  __device__ __forceinline__ void exchange() {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      lane.halo.left[k] = __shfl_up_sync(0xffffffffu, lane.halo.last[k], 1);
      lane.halo.right[k] = __shfl_down_sync(0xffffffffu, lane.halo.first[k], 1);
    }
  }
  __device__ __forceinline__ void barrier() { __syncthreads(); }
  __device__ __forceinline__ void reduce_warp_sums() {
#pragma unroll
    for (int mask = kWarpLanes / 2; mask > 0; mask /= 2) lane.part += __shfl_xor_sync(0xffffffffu, lane.part, mask);
  }
};
#endif

template <class Lane, typename acc_t>
struct HostLanes {
  using acc_type = acc_t;
  static constexpr int kRing = Lane::kRing;
  Lane* lanes;  // the warp's 32 lanes
  acc_t* shared;
  // Hands over to the other warps of the unit; told where the march calls the barrier, so that the
  // emulation can leave one out (csrc/cpu/emulation.cpp, skipped_barrier).
  std::function<void(const char* file, int line)> wait_at_barrier;

  template <class F>
  void each(F&& f) {
    for (int i = 0; i < kWarpLanes; ++i) f(lanes[i]);
  }
  // A shuffle reads every lane's value before any lane writes; the first lane of a warp gets
  // its own last sample, the last lane its own first one (as __shfl_up/down_sync do).
  template <int K>
  void exchange() {
    for (int i = 0; i < kWarpLanes; ++i) {
      for (int k = 0; k < K; ++k) {
        lanes[i].halo.left[k] = lanes[i > 0 ? i - 1 : i].halo.last[k];
        lanes[i].halo.right[k] = lanes[i < kWarpLanes - 1 ? i + 1 : i].halo.first[k];
      }
    }
  }
  void barrier(const char* file = __builtin_FILE(), int line = __builtin_LINE()) { wait_at_barrier(file, line); }
  void reduce_warp_sums() {
    for (int mask = kWarpLanes / 2; mask > 0; mask /= 2) {
      acc_t next[kWarpLanes];
      for (int l = 0; l < kWarpLanes; ++l) next[l] = lanes[l].part + lanes[l ^ mask].part;
      for (int l = 0; l < kWarpLanes; ++l) lanes[l].part = next[l];
    }
  }
};

}  // namespace segnet
