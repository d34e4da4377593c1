// Host side of a march launch, shared by the CUDA launcher and the host emulation: the geometry
// for a call's tensors (whole-vector loads only where every pointer allows them) and the choice
// of the kernel instantiation (2D or 3D, whole-vector or clamped sample loads).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "../checks.h"
#include "entry.h"
#include "geometry.h"

namespace segnet {

// `shared_limit`: the most shared memory a block may opt into on the device (make_march_geometry).
// `resident_units(g)`: how many units of the launch laid out as g the device runs at a time (the
// launch's segments follow from it: split_outer_axis). It is asked before the split, so it may
// read g's layout (threads, shared_bytes, unit_warps, vector) but not its segments or units.
template <int NDIM, Pass PASS, typename scalar_t, typename acc_t, typename Residency>
MarchGeometry march_geometry(const at::Tensor& x, std::initializer_list<at::Tensor> data, size_t shared_limit,
                             Residency&& resident_units) {
  constexpr int S = strip_width<NDIM, PASS, scalar_t>();
  bool aligned = true;
  for (const at::Tensor& t : data) aligned = aligned && reinterpret_cast<uintptr_t>(t.data_ptr()) % (S * sizeof(scalar_t)) == 0;
  const Extent e = extent_of(x);
  MarchGeometry g = make_march_geometry(NDIM, e.size, e.planes, e.channels, PASS, S, sizeof(scalar_t), sizeof(acc_t),
                                        aligned, shared_limit);
  const int bounds = g.vector ? launch_bounds<NDIM, PASS, true>() : launch_bounds<NDIM, PASS, false>();
  TORCH_INTERNAL_ASSERT(g.threads == bounds, "edge_enhance: the block size differs from the kernel's launch bounds");
  split_outer_axis(g, resident_units(g));
  TORCH_CHECK(g.units <= kMaxUnits, "edge_enhance: x of shape ", x.sizes(), " needs ", g.units,
              " warps, more than one launch of the CUDA kernel handles (", kMaxUnits,
              "); split the batch into smaller ones");
  return g;
}

// Calls run(std::integral_constant<int, NDIM>{}) for x's number of spatial axes.
template <typename F>
void with_ndim(const at::Tensor& x, F&& run) {
  if (x.dim() == 4) run(std::integral_constant<int, 2>{});
  else run(std::integral_constant<int, 3>{});
}

// Calls run(std::bool_constant<VECTOR>{}): the instantiation with whole-vector loads, or the
// general one with clamped sample loads.
template <typename F>
void with_vector(bool vector, F&& run) {
  if (vector) run(std::true_type{});
  else run(std::false_type{});
}

}  // namespace segnet
