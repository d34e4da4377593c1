// Second pass of grad_alpha: one block per channel adds up the channel's per-warp partial sums
// (stored channel-major by the backward march) in a fixed order, so the result is the same on
// every run.
#pragma once

#include <cstdint>

#include "../edge_stencil.h"

namespace segnet {

constexpr int kSumThreads = 256;

// Phase 1: each thread adds a strided share of the channel's partials.
template <typename acc_t>
SEGNET_HD void channel_sum_load(int64_t c, int t, acc_t* smem, const acc_t* partials, int64_t per_channel) {
  acc_t s = acc_t(0);
  for (int64_t i = t; i < per_channel; i += kSumThreads) s += partials[c * per_channel + i];
  smem[t] = s;
}

// One step of a fixed-order tree reduction over kSumThreads values (stride kSumThreads/2 ... 1).
template <typename acc_t>
SEGNET_HD void reduce_step(int t, int stride, acc_t* values) {
  if (t < stride) values[t] += values[t + stride];
}

template <typename scalar_t, typename acc_t>
SEGNET_HD void channel_sum_store(int64_t c, int t, const acc_t* smem, scalar_t* grad_alpha) {
  if (t == 0) grad_alpha[c] = static_cast<scalar_t>(smem[0]);
}

}  // namespace segnet
