// A lane's strip of S samples along a row: loaded as one vector where the row allows it, sample by
// sample (clamped to the row: the replicate border) where it does not; converted to the
// accumulation type on the way in and back on the way out.
#pragma once

#include <cstdint>
#include <cstring>

#include "../edge_stencil.h"

namespace segnet {

// The vector type of one strip's bytes, so that a strip is one load or store instruction.
#if defined(__CUDACC__)
template <int BYTES>
struct VectorOf;
template <>
struct VectorOf<4> {
  using type = unsigned int;
};
template <>
struct VectorOf<8> {
  using type = uint2;
};
template <>
struct VectorOf<16> {
  using type = uint4;
};
#else
template <int BYTES>
struct VectorOf {
  struct alignas(BYTES) type {
    unsigned char bytes[BYTES];
  };
};
#endif

// A strip loaded sample by sample and not yet used (the general form's prefetch, prefetch.h).
template <int S, typename scalar_t>
struct LoadedStrip {
  scalar_t samples[S];
};

template <typename scalar_t, int S>
SEGNET_HD void store_vector(scalar_t* p, const scalar_t (&in)[S]) {
#if defined(__CUDA_ARCH__)
  using V = typename VectorOf<S * sizeof(scalar_t)>::type;
  V bits;
  memcpy(&bits, in, sizeof(V));
  *reinterpret_cast<V*>(p) = bits;
#else
  std::memcpy(p, in, sizeof(in));
#endif
}

// Samples w0 .. w0 + S - 1 of a row of length n, clamped to the row, one load per sample.
template <int S, typename scalar_t>
SEGNET_HD void load_strip(const scalar_t* row, int w0, int n, LoadedStrip<S, scalar_t>& out) {
#pragma unroll
  for (int i = 0; i < S; ++i) out.samples[i] = row[clamp_index(w0 + i, n)];
}

// Where the strip at w0 starts when it is one whole vector (n % S == 0, aligned rows): lanes
// past the row end take its last strip, which is valid memory (their values are never used).
template <int S, typename scalar_t>
SEGNET_HD const scalar_t* vector_strip(const scalar_t* row, int w0, int n) {
  return row + (w0 < n - S ? w0 : n - S);
}

#if defined(__CUDACC__)
// cp.async (compute capability 8.0 and up) copies global to shared memory without passing through
// registers. Older GPUs (7.5: T4, RTX 20xx) get plain loads, compiled for them alone.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define SEGNET_PLAIN_STRIP_COPIES 1
#endif

// The whole-vector strip at w0, copied to `to` in shared memory. With cp.async the copy runs while
// the lane computes, and nothing but the explicit wait_for_copies() waits for it; with plain loads
// it is a vector load and a shared store, done when the call returns, and the waits are no-ops.
// The host emulation performs the copies itself (prefetch.h).
template <int S, typename scalar_t>
__device__ __forceinline__ void copy_strip_async(const scalar_t* row, int w0, int n, scalar_t* to) {
  const scalar_t* from = vector_strip<S>(row, w0, n);
  constexpr int kBytes = S * sizeof(scalar_t);
#if defined(SEGNET_PLAIN_STRIP_COPIES)
  using V = typename VectorOf<kBytes>::type;
  *reinterpret_cast<V*>(to) = *reinterpret_cast<const V*>(from);
#else
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(to));
  if constexpr (kBytes == 16) {  // .cg: 16-byte copies may skip L1 (the halo rows hit L2 anyway)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(from) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(address), "l"(from), "n"(kBytes) : "memory");
  }
#endif
}

// Closes the group of copies issued since the last call.
__device__ __forceinline__ void commit_copies() {
#if !defined(SEGNET_PLAIN_STRIP_COPIES)
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Waits until at most PENDING of this lane's most recent groups of copies are still in flight.
template <int PENDING>
__device__ __forceinline__ void wait_for_copies() {
#if !defined(SEGNET_PLAIN_STRIP_COPIES)
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
#endif
}
#endif

template <int S, typename scalar_t, typename acc_t>
SEGNET_HD void widen(const scalar_t* samples, acc_t (&out)[S]) {
#pragma unroll
  for (int i = 0; i < S; ++i) out[i] = static_cast<acc_t>(samples[i]);
}

// A strip staged in shared memory, read as one vector (lanes' strips are side by side: no bank
// conflict) and widened.
template <int S, typename scalar_t, typename acc_t>
SEGNET_HD void widen_staged(const scalar_t* staged, acc_t (&out)[S]) {
  using V = typename VectorOf<S * sizeof(scalar_t)>::type;
  const V bits = *reinterpret_cast<const V*>(staged);
  scalar_t samples[S];
  memcpy(samples, &bits, sizeof(samples));
  widen(samples, out);
}

// Stores the samples of the strip that lie inside the row.
template <bool VECTOR, int S, typename scalar_t, typename acc_t>
SEGNET_HD void store_strip(scalar_t* row, int w0, int n, const acc_t (&in)[S]) {
  if (VECTOR) {
    scalar_t raw[S];
#pragma unroll
    for (int i = 0; i < S; ++i) raw[i] = static_cast<scalar_t>(in[i]);
    store_vector(row + w0, raw);
  } else {
#pragma unroll
    for (int i = 0; i < S; ++i) {
      if (w0 + i < n) row[w0 + i] = static_cast<scalar_t>(in[i]);
    }
  }
}

}  // namespace segnet
