"""The kernels' launch geometry as the model reads it from their own code
(scripts/kernel_model/geometry.py): strips, units and shared layout, packed short rows, and
segments sized for the device's resident units."""

from __future__ import annotations

import pytest

from scripts.kernel_model.geometry import launch


@pytest.mark.usefixtures("cpu_library")
def test_the_launch_geometry_comes_from_the_kernels():
    g = launch((2, 32, 128, 128, 128), "float32", backward=True)
    assert (g["strip"], g["unit_warps"], g["rows_per_unit"], g["threads"]) == (4, 16, 14, 512)
    assert g["shared_lane_stride"] == 4  # conflict-free: one word per lane
    assert g["units"] == 64 * g["row_groups"] * g["spans"] * g["segments"]


@pytest.mark.usefixtures("cpu_library")
def test_short_3d_forward_rows_are_packed_several_to_a_warp():
    shape = (2, 16, 64, 96, 96)  # 96 float16 samples: 12 strips of 8
    g = launch(shape, "float16", backward=False)
    assert (g["strip"], g["row_lanes"], g["rows_per_warp"], g["rows_per_unit"], g["row_groups"]) == (8, 12, 2, 2, 48)
    backward = launch(shape, "float16", backward=True)  # its rows trade u through shared memory
    assert (backward["row_lanes"], backward["rows_per_warp"]) == (32, 1)
    long_rows = launch((1, 1, 8, 8, 256), "float16", backward=False)
    assert (long_rows["row_lanes"], long_rows["rows_per_warp"]) == (32, 1)


@pytest.mark.usefixtures("cpu_library")
def test_segments_fill_an_idle_device_and_stay_long_on_a_full_one():
    shape = (2, 16, 64, 96, 96)  # the 3D backward pass: 224 units per segment position, 4 extra planes each
    idle = launch(shape, "float32", backward=True, resident_units=10_000)
    assert (idle["segment"], idle["segments"], idle["extra_planes"]) == (8, 8, 4)  # one wave: the shortest
    # On 132 resident units: 1 segment takes 2 waves x 68 steps = 136; 2: 4 x 36 = 144; 4: 7 x 20 = 140;
    # 5 (of 13): 9 x 17 = 153; 8: 14 x 12 = 168.
    full = launch(shape, "float32", backward=True, resident_units=132)
    assert (full["segment"], full["segments"], full["units"]) == (64, 1, 224)
    assert launch(shape, "float32", backward=False)["extra_planes"] == 2
    assert launch(shape, "float32", backward=True, resident_units=2**62)["segments"] == 8
    for outer in (1, 5):  # shorter than a segment: one, of kMinSegment planes (the march stops at the end)
        short = launch((2, 3, outer, 9, 16), "float32", backward=True, resident_units=1)
        assert (short["segment"], short["segments"]) == (8, 1)


@pytest.mark.usefixtures("cpu_library")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_block_over_the_device_s_shared_memory_takes_the_general_form(dtype):
    """The 3D backward pass stages 88 KB per block in float32 and float64; a 7.5 GPU (a T4) lets a
    block opt into 64 KB, so there the launch is the general form's, and on an H200 it is not."""
    shape = (2, 8, 32, 64, 128)
    staged = launch(shape, dtype, backward=True, shared_limit=227 * 1024)
    assert staged["vector"] == 1 and staged["shared_bytes"] == 88 * 1024
    on_t4 = launch(shape, dtype, backward=True, shared_limit=64 * 1024)
    assert on_t4 == launch(shape, dtype, backward=True, vector=False)
    assert on_t4["vector"] == 0 and on_t4["shared_bytes"] <= 64 * 1024
    assert launch(shape, "float16", backward=True, shared_limit=64 * 1024)["vector"] == 1  # 56 KB fits
