"""The heads dataset (segnet.generated.heads) has what real archives have and the other generated
datasets hide: fields of view from cutting into the scalp to nearly all air, noise for air,
zero-filled borders, a scanner per case, and folds that each hold out a band of the head."""

from __future__ import annotations

import json

import numpy as np
import pytest

import segnet.generated.heads as heads
from segnet.data.dataset_json import describe_dataset
from segnet.data.splits import choose_split


@pytest.fixture(autouse=True)
def one_slice(monkeypatch):
    """Each case one slice thick: the anatomy of six, faster."""
    monkeypatch.setattr(heads, "SLICES", 1)


@pytest.fixture(scope="module")
def cases():
    """Ten cases, two per band, one slice each."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(heads, "SLICES", 1)
        return [heads.heads_case(i) for i in range(10)]


def test_each_fold_holds_out_one_band_of_the_head(tmp_path):
    root = heads.write_heads_dataset(tmp_path / "Heads", cases=5)
    description = describe_dataset(str(root))
    assert len(json.loads((root / "splits_final.json").read_text())) == 5  # nnU-Net's file, which both tools read
    for fold, region in enumerate(heads.REGIONS):
        split = choose_split(description, fold, 5, 12345)
        assert [c.name for c in split.val] == [f"heads_{fold:03d}"] and len(split.train) == 4
        assert heads.heads_case(fold).region == region.name
    # no slice height of a band is any other band's: a slab's slices lie at its centre +- 10 mm
    spans = sorted((r.centres[0] - 10, r.centres[1] + 10) for r in heads.REGIONS)
    assert all(low > high for (_, high), (low, _) in zip(spans, spans[1:], strict=False))


def test_the_background_takes_from_under_a_half_to_nearly_all_of_a_case(cases):
    shares = {case.region: [] for case in cases}
    for case in cases:
        shares[case.region].append(case.background)
    everything = [s for values in shares.values() for s in values]
    assert min(everything) < 0.45 and min(shares["top"]) > 0.95  # the held-out top: wide fields only


def test_air_is_scanner_noise_and_a_zero_border_is_exact_zeros(cases):
    zeros_in_frame = []
    for case in cases:
        frame = np.ones(case.image.shape, bool)
        frame[4:-4, 4:-4] = False
        zeros_in_frame.append((case.image[frame] == 0).mean())
        assert case.image.min() >= 0 and np.array_equal(case.image, np.round(case.image))  # magnitude, integers
    assert all(share > 0.99 or share < 0.05 for share in zeros_in_frame)  # a zero border, or noise to the edge
    assert 0 < sum(share > 0.99 for share in zeros_in_frame) < len(cases)


def test_the_tip_of_the_brain_has_little_white_matter(cases):
    white = {case.region: [] for case in cases}
    for case in cases:
        white[case.region].append((case.label == 2).sum() / max(1, (case.label > 0).sum()))
    assert max(white["top"]) < min(min(values) for region, values in white.items() if region != "top")


def test_a_case_is_a_function_of_the_seed_and_its_index():
    first, again = heads.heads_case(3, seed=1), heads.heads_case(3, seed=1)
    assert np.array_equal(first.image, again.image) and np.array_equal(first.label, again.label)
    assert not np.array_equal(heads.heads_case(3, seed=2).label, first.label)
    with pytest.raises(ValueError, match="cases >= 5"):
        heads.write_heads_dataset(None, cases=4)
