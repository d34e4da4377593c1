"""The kernels' launch geometry, from their own code: the test-only op segnet_ops::_march_launch
(csrc/cpu/emulation.cpp) calls make_march_geometry() and split_outer_axis(), so the model sees the
launch the CUDA launcher makes."""

from __future__ import annotations

# The op's numbers, in its order.
LAUNCH_FIELDS = ("outer", "middle", "inner", "strip", "spans", "row_lanes", "rows_per_warp", "rows_per_unit",
                 "row_groups", "segment", "segments", "extra_planes", "unit_warps", "units", "blocks", "threads",
                 "shared_bytes", "shared_lane_stride", "vector")
UNLIMITED_SHARED = 2**31 - 1


def launch(shape: tuple[int, ...], dtype: str, backward: bool, vector: bool = True,
           resident_units: int = 1, shared_limit: int = UNLIMITED_SHARED) -> dict[str, int]:
    """The kernels' launch geometry for `shape` (make_march_geometry() and split_outer_axis(),
    through the test-only op): of the whole-vector kernel, or of the general form, on a device
    that runs `resident_units` of its units at a time (only the segments depend on it) and lets
    a block opt into `shared_limit` bytes of shared memory (a whole-vector layout that needs more
    takes the general form: `vector` is 0)."""
    import torch  # here, not above: reading SASS and the model's pieces need no torch

    values = torch.ops.segnet_ops._march_launch(list(shape), getattr(torch, dtype), backward, vector, resident_units,
                                                shared_limit)
    return dict(zip(LAUNCH_FIELDS, values, strict=True))


def output_warps(g: dict[str, int]) -> int:
    """The warps of a unit that own outputs: all but the 3D backward pass's two halo rows."""
    return g["rows_per_unit"] // g["rows_per_warp"]
