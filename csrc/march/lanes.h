// How the lanes of one unit run the march together. The march (csrc/march/forward.h,
// backward.h) is written once against a lane group with four operations:
//   each(f)            run f on every lane's state (the code between two exchanges),
//   exchange<K>()      every lane receives the last samples of K quantities from the lane before
//                      it and the first samples from the lane after it (a warp shuffle),
//   barrier()          all warps of the unit reach this point (3D backward only),
//   reduce_warp_sums() each warp's lane sums added up, the total in every lane (a butterfly).
// On the GPU, DeviceLanes is one thread: its state lives in registers and the exchanges are
// shuffles. On the host, HostLanes holds the state of every lane of the unit and runs each
// operation for all of them before the next, so shuffles and barriers are emulated exactly.
#pragma once

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
  Lane* lanes;
  int count;  // unit_warps * 32
  acc_t* shared;

  template <class F>
  void each(F&& f) {
    for (int i = 0; i < count; ++i) f(lanes[i]);
  }
  // A shuffle reads every lane's value before any lane writes; the first lane of a warp gets
  // its own last sample, the last lane its own first one (as __shfl_up/down_sync do).
  template <int K>
  void exchange() {
    for (int i = 0; i < count; ++i) {
      const int lane = i % kWarpLanes;
      for (int k = 0; k < K; ++k) {
        lanes[i].halo.left[k] = lanes[lane > 0 ? i - 1 : i].halo.last[k];
        lanes[i].halo.right[k] = lanes[lane < kWarpLanes - 1 ? i + 1 : i].halo.first[k];
      }
    }
  }
  void barrier() {}
  void reduce_warp_sums() {
    for (int warp = 0; warp < count; warp += kWarpLanes) {
      Lane* w = lanes + warp;
      for (int mask = kWarpLanes / 2; mask > 0; mask /= 2) {
        acc_t next[kWarpLanes];
        for (int l = 0; l < kWarpLanes; ++l) next[l] = w[l].part + w[l ^ mask].part;
        for (int l = 0; l < kWarpLanes; ++l) w[l].part = next[l];
      }
    }
  }
};

}  // namespace segnet
