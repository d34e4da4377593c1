"""The hard generated task (segnet.generated.hard): structures thinner than 3 voxels, a foreground that
stands out from the background by about the noise, partial volume at every boundary, and images that
are a function of their seed; on the fly (data=synthetic2d_hard) and as a dataset folder."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from helpers.training import compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.errors import ConfigError
from segnet.generated.hard import hard_image_2d, hard_shares, write_hard_dataset
from segnet.training.synthetic_data import SyntheticDataModule

NOISE = 0.4


def drawn(seed: int, size: int = 64):
    return hard_image_2d(size, np.random.RandomState(seed), noise=NOISE)


def test_the_foreground_stands_out_by_no_more_than_a_few_noise_deviations():
    """Contrast-to-noise (mean foreground minus mean background, over the noise's std) below 2.5 on every
    image, and the per-voxel classes overlap: hundreds of background voxels are brighter than the median
    foreground voxel."""
    for seed in range(10):
        image, label = drawn(seed)
        foreground, background = image[label > 0], image[label == 0]
        cnr = (foreground.mean() - background.mean()) / NOISE
        assert 0.5 < cnr < 2.5, (seed, cnr)
        assert (background > np.median(foreground)).sum() > 50


def test_every_structure_is_thinner_than_3_voxels():
    """A 3 x 3 erosion leaves little of either class (only where structures cross or touch): most of it
    is less than 3 voxels wide; and both classes are present, each a few percent of the image."""
    for seed in range(10):
        _, label = drawn(seed)
        for c in (1, 2):
            mask = label == c
            assert 0.01 < mask.mean() < 0.15, (seed, c, mask.mean())
            assert ndimage.binary_erosion(mask, np.ones((3, 3))).sum() < 0.2 * mask.sum(), (seed, c)


def test_boundary_voxels_are_partly_covered_and_labelled_by_the_larger_share():
    shares = hard_shares(64, np.random.RandomState(3))
    structure = shares[1] + shares[2]
    partial = (structure > 0) & (structure < 1)
    assert partial.sum() > 0.5 * (structure == 1).sum()  # thin: as many boundary voxels as whole ones
    _, label = hard_image_2d(64, np.random.RandomState(3), noise=NOISE)
    assert np.array_equal(label == 2, shares[2] >= 0.5)
    assert np.array_equal(label == 1, (shares[1] >= 0.5) & (shares[2] < 0.5))


def test_an_image_is_a_function_of_its_seed():
    first, again, other = drawn(7), drawn(7), drawn(8)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not np.array_equal(first[1], other[1])


def test_the_data_config_draws_them_and_refuses_3d():
    cfg = compose_config(["data=synthetic2d_hard", "data.image_size=32", "data.num_train=2", "data.num_val=2"])
    assert cfg.data.difficulty == "hard" and list(cfg.data.class_names) == ["background", "tube", "ring"]
    from segnet.training.train import instantiate_data

    module = instantiate_data(cfg.data)
    sample = module.train_set[1]
    assert sample["image"].shape == (1, 32, 32) and set(np.unique(sample["label"].numpy())) <= {0, 1, 2}
    assert np.array_equal(sample["image"].numpy(), module.train_set[1]["image"].numpy())
    assert not np.array_equal(sample["image"].numpy(), module.val_set[1]["image"].numpy())  # disjoint seeds
    with pytest.raises(ConfigError, match="data.difficulty=hard draws 2D images"):
        SyntheticDataModule(spatial_dims=3, difficulty="hard")
    with pytest.raises(ConfigError, match="data.difficulty=medium"):
        SyntheticDataModule(difficulty="medium")


def test_a_dataset_folder_of_them(tmp_path):
    root = write_hard_dataset(tmp_path / "Hard", cases=2, size=32, slices=2, seed=1)
    description = describe_dataset(str(root))
    assert [c.name for c in description.labelled] == ["hard_000", "hard_001"]
    assert list(description.class_names) == ["background", "tube", "ring"]
