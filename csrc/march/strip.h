// A lane's strip of S samples along a row: loaded as one vector where the row allows it, sample by
// sample (clamped to the row: the replicate border) where it does not; converted to the
// accumulation type on the way in and back on the way out.
#pragma once

#include <cstdint>
#include <cstring>

#include "../edge_stencil.h"

namespace segnet {

#if defined(__CUDACC__)
// The vector type of one strip's bytes, so that a strip is one load or store instruction.
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
#endif

template <typename scalar_t, int S>
SEGNET_HD void load_vector(const scalar_t* p, scalar_t (&out)[S]) {
#if defined(__CUDA_ARCH__)
  using V = typename VectorOf<S * sizeof(scalar_t)>::type;
  const V bits = __ldg(reinterpret_cast<const V*>(p));  // read-only path: x and grad_y never alias outputs
  memcpy(out, &bits, sizeof(V));
#else
  std::memcpy(out, p, sizeof(out));
#endif
}

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

// Samples w0 .. w0 + S - 1 of a row of length n (clamped), as stored. With VECTOR (n % S == 0,
// aligned rows), one load; lanes past the row end read its last strip, which is valid memory
// (their values are never used). The march loads a strip one step before it converts it, so
// the load's latency is covered by the step in between.
template <bool VECTOR, int S, typename scalar_t>
SEGNET_HD void load_strip(const scalar_t* row, int w0, int n, scalar_t (&out)[S]) {
  if (VECTOR) {
    load_vector(row + (w0 < n - S ? w0 : n - S), out);
  } else {
#pragma unroll
    for (int i = 0; i < S; ++i) out[i] = row[clamp_index(w0 + i, n)];
  }
}

template <int S, typename scalar_t, typename acc_t>
SEGNET_HD void widen(const scalar_t (&in)[S], acc_t (&out)[S]) {
#pragma unroll
  for (int i = 0; i < S; ++i) out[i] = static_cast<acc_t>(in[i]);
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
