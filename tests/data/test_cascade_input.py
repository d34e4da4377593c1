"""The cascade's first-stage channels (segnet.data.cascade_input): one-hot by the foreground
label values, and nnU-Net's perturbations of them: morphology by a ball of the drawn radius that
keeps every voxel in one channel at most, and one small component removed, never a large one."""

from __future__ import annotations

import numpy as np
import pytest

from segnet.data.cascade_input import (
    COMPONENT_LARGEST_SHARE,
    dilate,
    erode,
    one_hot,
    perturb_with_operators,
    previous_values,
    remove_a_component,
)
from segnet.data.regions import Regions


def test_channels_are_the_foreground_label_values_of_classes_or_of_regions():
    assert previous_values(3, None) == [1, 2]
    regions = Regions.from_settings({"values": [[1, 2, 3], [2, 3], [3]], "class_order": [1, 2, 3]})
    assert previous_values(4, regions) == [1, 2, 3]
    label = np.array([[[0, 1], [2, 2]]])
    assert one_hot(label, [1, 2]).tolist() == [[[0, 1], [0, 0]], [[0, 0], [1, 1]]]


def test_dilation_and_erosion_are_by_a_euclidean_ball_of_the_radius():
    mask = np.zeros((21, 21, 21), bool)
    mask[10, 10, 10] = True
    grown = dilate(mask, 3.5)
    z, y, x = np.indices(mask.shape) - 10
    assert np.array_equal(grown, z**2 + y**2 + x**2 <= 3.5**2)
    # radius 1: the voxels whose six face neighbours are all inside
    inside = grown.copy()
    for axis in range(3):
        for step in (1, -1):
            inside &= np.roll(grown, step, axis)
    assert np.array_equal(erode(grown, 1.0), inside)
    assert not dilate(np.zeros((4, 4), bool), 2.0).any()


def test_operators_keep_every_voxel_in_one_channel_at_most():
    label = np.zeros((1, 24, 24, 24), np.uint8)
    label[0, 4:12, 4:12, 4:12] = 1
    label[0, 12:20, 12:20, 12:20] = 2
    channels = one_hot(label, [1, 2])
    random = np.random.RandomState(0)
    changed = 0
    for _ in range(10):
        out = perturb_with_operators(channels, random)
        assert out.dtype == channels.dtype and out.sum(0).max() <= 1
        changed += not np.array_equal(out, channels)
    assert changed >= 8  # a radius of 1 to 8 voxels moves an 8-voxel cube's faces nearly every time


def test_one_component_below_the_share_is_removed_and_a_large_one_never():
    channel = np.zeros((20, 20), np.uint8)
    channel[1:3, 1:3] = 1  # 4 voxels: small
    channel[10:12, 10:12] = 1  # 4 voxels: small
    channel[:, 15:] = 1  # 100 voxels: a quarter of the slice, over the share
    assert 100 >= COMPONENT_LARGEST_SHARE * channel.size
    removed = [remove_a_component(channel, np.random.RandomState(seed)) for seed in range(20)]
    for out in removed:
        assert out[:, 15:].all() and channel.sum() - out.sum() == 4
    assert {out[1, 1] for out in removed} == {0, 1}  # either small one, at random
    assert np.array_equal(remove_a_component(channel[:, 15:], np.random.RandomState(0)), channel[:, 15:])


@pytest.mark.parametrize("values", [[1], [1, 2, 3]])
def test_one_hot_has_a_channel_per_value(values):
    assert one_hot(np.zeros((1, 3, 3), np.uint8), values).shape == (len(values), 3, 3)
