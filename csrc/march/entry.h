// The kernels' entry, shared by the CUDA kernels and the host emulation: which unit, and which
// thread of it, a thread of the launch is. A block holds whole units, so the threads past the
// last unit leave together (no barrier of the 3D backward pass waits for a missing warp).
#pragma once

#include <cstdint>

#include "geometry.h"

namespace segnet {

// Launch bounds of the kernel for (NDIM, PASS, VECTOR): the block size its launch uses.
template <int NDIM, Pass PASS, bool VECTOR>
constexpr int launch_bounds() {
  constexpr int threads = block_threads(NDIM, PASS, VECTOR);
  constexpr int unit = unit_warps(NDIM, PASS, VECTOR) * kWarpLanes;
  static_assert(threads % unit == 0, "a block must hold whole units");
  static_assert(threads <= kMaxThreadsPerBlock, "a block has at most 1024 threads");
  return threads;
}

struct ThreadPlace {
  int64_t unit;
  int thread;  // within the unit
};

SEGNET_HD ThreadPlace thread_place(const MarchGeometry& g, int64_t block, int thread_in_block) {
  const int unit_threads = g.unit_warps * kWarpLanes;
  const int units_per_block = g.threads / unit_threads;
  return {block * units_per_block + thread_in_block / unit_threads, thread_in_block % unit_threads};
}

// The shared memory of the unit a thread belongs to, within its block's.
SEGNET_HD unsigned char* unit_shared(const MarchGeometry& g, unsigned char* block_shared, int thread_in_block) {
  return block_shared + thread_in_block / (g.unit_warps * kWarpLanes) * g.unit_shared_bytes;
}

}  // namespace segnet
