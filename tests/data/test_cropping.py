"""The crop before normalization (segnet.data.cropping): the box around the anatomy is the same
however much air, noise or zero border surrounds it, and the planner takes the tightest rule
that keeps every label."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from monai.data import MetaTensor

from helpers.data import head_in_noise
from segnet.data.cropping import crop_box, crop_transform
from segnet.data.dataset_json import Case, DatasetDescription
from segnet.errors import ConfigError
from segnet.planning.fingerprint import case_fingerprint, label_margin
from segnet.planning.planner import crop_rule, warn_of_cut_labels


@pytest.fixture(scope="module")
def head() -> tuple[np.ndarray, np.ndarray]:
    """A T1 head (2 slices) in a field of view of its scanner's noise."""
    return head_in_noise()


def air_of(image: np.ndarray, shape, seed: int) -> np.ndarray:
    """Noise as the scanner's air: drawn from the image's own corner."""
    return np.random.default_rng(seed).choice(image[:16, :16].ravel(), size=shape).astype(np.float32)


def test_the_body_box_is_the_same_around_the_same_head_whatever_surrounds_it(head):
    image, label = head
    start, end = crop_box(image[None], "body")
    inside = label > 0
    for axis in range(3):
        labelled = np.flatnonzero(inside.any(axis=tuple(a for a in range(3) if a != axis)))
        assert start[axis] <= labelled[0] and labelled[-1] < end[axis]
    box = tuple(slice(s, e) for s, e in zip(start, end, strict=True))
    assert 0.1 < np.prod([e - s for s, e in zip(start, end, strict=True)]) / image.size < 0.5  # the air is cut
    wide = air_of(image, (300, 280, 2), 1)
    wide[50:242, 70:262] = image  # a wider field of view: more noise
    widest = air_of(image, (900, 900, 2), 2)
    widest[200:392, 230:422] = image  # the head 0.3 % of it
    zeros = np.pad(image, [(17, 9), (30, 4), (0, 0)])  # a zero-filled border
    tight = image[box[0].start - 3: box[0].stop + 3, box[1].start - 3: box[1].stop + 3]  # cut near the head
    forms = ((wide, (50, 70)), (widest, (200, 230)), (zeros, (17, 30)), (tight, (3 - box[0].start, 3 - box[1].start)))
    for variant, offset in forms:
        got_start, got_end = crop_box(variant[None], "body")
        moved = [s + o for s, o in zip(start[:2], offset, strict=True)]
        assert abs(np.array(got_start[:2]) - moved).max() <= 1 and got_start[2] == 0
        assert abs(np.array(got_end[:2]) - [e + o for e, o in zip(end[:2], offset, strict=True)]).max() <= 1


def test_the_nonzero_box_cuts_a_zero_border_and_nothing_else(head):
    image, _ = head
    padded = np.pad(image, [(6, 2), (0, 11), (0, 0)])
    assert crop_box(padded[None], "nonzero") == ([6, 0, 0], [6 + image.shape[0], image.shape[1], 2])
    assert crop_box(padded[None], "none") == ([0, 0, 0], list(padded.shape))


def test_a_noisy_scan_of_a_small_head_is_boxed_around_the_head():
    # a generated head 3 % of its field, from a scanner whose air reaches the tissue's values
    from segnet.generated.heads import heads_case

    image, label, _, _ = heads_case(35)
    start, end = crop_box(image[None], "body")
    labelled = np.argwhere(label > 0)
    assert (np.array(start) <= labelled.min(0)).all() and (labelled.max(0) < np.array(end)).all()
    assert np.prod([e - s for s, e in zip(start, end, strict=True)]) / image.size < 0.15


def test_a_few_bright_noise_voxels_do_not_stretch_the_box(head):
    image, _ = head
    spiked = image.copy()
    spiked[2, 3, 0] = spiked[188, 190, 1] = image.max()  # two hot voxels in the air's corners
    assert crop_box(spiked[None], "body") == crop_box(image[None], "body")


def test_a_scan_without_anatomy_keeps_its_whole_volume():
    for flat in (np.zeros((1, 20, 30, 4)), np.full((1, 20, 30, 4), 7.0)):
        for crop in ("nonzero", "body"):
            assert crop_box(flat, crop) == ([0, 0, 0], [20, 30, 4])


def test_a_large_scan_is_boxed_on_a_coarser_grid_that_never_cuts_it(monkeypatch):
    import segnet.data.cropping as cropping

    image = np.zeros((1, 64, 64, 32), np.float32)
    block = ([13, 21, 5], [40, 50, 27])
    image[0, 13:40, 21:50, 5:27] = 100.0 + np.random.default_rng(0).normal(0, 1, (27, 29, 22))
    exact = crop_box(image, "body")
    monkeypatch.setattr(cropping, "MAX_VOXELS", 64 * 64 * 32 // 27)  # every third voxel along each axis
    coarse = crop_box(image, "body")
    for (start, end), stride in ((exact, 1), (coarse, 3)):  # never cuts the block, at most 2 strides wider
        assert all(0 <= b - s <= 2 * stride for s, b in zip(start, block[0], strict=True)), (start, end)
        assert all(0 <= e - b <= 2 * stride for e, b in zip(end, block[1], strict=True)), (start, end)


def test_the_plan_crops_to_the_body_only_where_unlabelled_anatomy_surrounds_every_label():
    def case(name: str, body: float, nonzero: float) -> dict:
        return {"name": name, "crops": {"body": {"label_margin": body}, "nonzero": {"label_margin": nonzero}}}

    assert crop_rule([case("a", 0.12, math.inf), case("b", 0.08, math.inf)])[0] == "body"
    assert crop_rule([case("a", 0.12, math.inf), case("b", 0.048, math.inf)])[0] == "body"  # 1 slice of 21
    crop, why = crop_rule([case("a", 0.12, math.inf), case("b", 0.01, math.inf)])  # b's box is cut tight
    assert crop == "nonzero" and why.startswith("b's labels come within 1.0% of its body box's edge")
    assert crop_rule([case("a", 0.12, 0.0), case("b", -0.02, 0.3)])[0] == "nonzero"
    crop, why = crop_rule([case("a", 0.12, 0.2), case("b", -0.1, -0.01)])  # a label where the image is zero
    assert crop == "none" and "b's beyond its non-zero box" in why


def test_the_margin_is_measured_on_the_faces_that_cut_the_volume():
    labelled = np.argwhere(np.pad(np.ones((4, 4, 3), bool), [(6, 10), (8, 8), (0, 0)]))  # (20, 20, 3) volume
    assert label_margin(labelled, [2, 4, 0], [18, 16, 3], (20, 20, 3)) == pytest.approx(4 / 16)  # z: no cut
    assert label_margin(labelled, [6, 0, 0], [20, 20, 3], (20, 20, 3)) == 0.0
    assert label_margin(labelled, [7, 0, 0], [20, 20, 3], (20, 20, 3)) == pytest.approx(-1 / 13)
    assert label_margin(labelled[:0], [7, 0, 0], [20, 20, 3], (20, 20, 3)) == math.inf
    assert label_margin(labelled, [0, 0, 0], [20, 20, 3], (20, 20, 3)) == math.inf


def test_the_margin_leaves_out_the_ignore_label():
    # the ignore label painted into the air is no label the box must keep
    rng = np.random.default_rng(0)
    image = np.full((40, 40, 4), 3.0, np.float32)  # air above zero: the non-zero box is the whole field
    image[10:30, 10:30] = rng.normal(100, 5, (20, 20, 4))
    label = np.zeros(image.shape, np.uint8)
    label[15:25, 15:25] = 1
    label[:4] = 2
    description = DatasetDescription(Path("."), "decathlon", ("T1",), ("background", "brain"), (), None,
                                     ignore_label=2)
    loaded = {"image": MetaTensor(torch.from_numpy(image)), "label": MetaTensor(torch.from_numpy(label))}
    entry, _ = case_fingerprint(Case("a", ("image",), "label"), loaded, description)
    assert entry["crops"]["body"] == {"shape": [20, 20, 4], "label_margin": pytest.approx(5 / 20)}
    assert entry["crops"]["nonzero"]["shape"] == [40, 40, 4]


def test_a_crop_that_is_not_one_of_the_rules_is_refused_by_its_setting():
    for crop in ("Body", "", "foreground"):
        with pytest.raises(ConfigError, match=f"data.crop={crop!r}: use one of none, nonzero, body"):
            crop_transform(["image"], crop)
    assert crop_transform(["image"], None) == crop_transform(["image"], "none") == []


def test_a_crop_set_by_hand_that_cuts_labels_is_warned_of(caplog):
    cases = [{"name": "a", "crops": {"body": {"label_margin": 0.2}}},
             {"name": "b", "crops": {"body": {"label_margin": -0.03}}}]
    warn_of_cut_labels(cases[:1], "body")
    assert not caplog.records
    warn_of_cut_labels(cases, "body")
    assert "b's reach beyond its body box" in caplog.text and "data.crop=null" in caplog.text
