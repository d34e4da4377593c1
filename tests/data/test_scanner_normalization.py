"""MRI normalization carries across scanners: the same head rendered by a quiet scanner
(its air exactly zero once stored in integers) and by a noisy one (its air noise) z-scores to the
same tissue intensities, because whether a dataset is masked is decided once for the dataset
(nnU-Net's rule), not per volume by whichever voxels happen to be zero."""

from __future__ import annotations

import numpy as np
import torch

from segnet.data.dataset_json import describe_dataset
from segnet.data.normalization import is_masked, normalization_plan, normalize
from segnet.data.transforms import case_dicts, eval_transforms, load_case
from segnet.generated.brain import CLASS_NAMES, Scanner, brain_case, draw_scanner
from segnet.generated.phantom import affine_for, write_case, write_dataset_json
from segnet.planning.fingerprint import nonzero_share
from segnet.planning.planner import Budget, plan_dataset
from segnet.planning.record import dataset_fingerprint

SHAPE, SPACING = (96, 96, 3), (1.0, 1.0, 4.0)
MODEL = {"channels": [8, 16], "strides": [2], "num_res_units": 1, "norm": "instance", "act": "prelu",
         "edge_placement": ["input", "skips"], "stem": "conv"}
QUIET = Scanner(gain=10.0, noise=0.01, magnitude=True)  # |noise| rounds to 0 in the air
NOISY = Scanner(gain=1000.0, noise=0.05, magnitude=True)


def head(scanner: Scanner, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    return brain_case(SHAPE, SPACING, np.random.RandomState(seed), scanner=scanner)


def tissue_medians(image: np.ndarray, label: np.ndarray, entry: dict) -> np.ndarray:
    z = normalize(torch.from_numpy(image.astype(np.float32)), entry).numpy()
    return np.array([np.median(z[label == tissue]) for tissue in (1, 2)])  # grey, white


def test_one_head_from_two_scanners_normalizes_alike():
    (quiet, label), (noisy, _) = head(QUIET), head(NOISY)
    assert (quiet == 0).mean() > 0.2 and (noisy == 0).mean() < 0.01  # the difference the scanners make
    (entry,) = normalization_plan(["T1"], [{}], [nonzero_share([quiet], SHAPE), nonzero_share([noisy], SHAPE)])
    assert entry == {"channel": "T1", "scheme": "zscore", "nonzero": False}  # the heads fill their volumes
    planned = [tissue_medians(image, label, entry) for image in (quiet, noisy)]
    assert np.abs(planned[0] - planned[1]).max() < 0.15
    per_volume = [tissue_medians(image, label, {"scheme": "zscore", "nonzero": True}) for image in (quiet, noisy)]
    assert np.abs(per_volume[0] - per_volume[1]).max() > 0.4  # what z-scoring each volume's non-zero voxels did


def test_a_masked_dataset_z_scores_its_non_zero_voxels():
    image, label = head(NOISY)
    stripped = np.zeros_like(image)
    stripped[20:76, 24:72] = image[20:76, 24:72]  # the brain's box kept, the rest masked to zero
    share = nonzero_share([stripped], SHAPE)
    assert share < 0.4 and is_masked([share, share, 1.0]) and not is_masked([share, 1.0, 1.0])
    (entry,) = normalization_plan(["T1"], [{}], [share])
    z = normalize(torch.from_numpy(stripped), entry)
    assert entry["nonzero"] and float(z[stripped == 0].abs().max()) == 0.0
    assert abs(float(z[stripped != 0].mean())) < 1e-4


def test_a_zero_border_moves_no_tissue_to_other_z_scores(tmp_path):
    # nnU-Net crops to the non-zero region before it z-scores: a scan padded with zeros by its
    # export is normalized as the scan itself
    image, label = head(NOISY)
    border = [(14, 10), (6, 20), (0, 0)]
    names = ["head", "padded"]
    for name, (volume, labels) in zip(names, ((image, label), (np.pad(image, border), np.pad(label, border))),
                                      strict=True):
        write_case(tmp_path / "T1", name, [volume], labels, affine_for(SPACING, "RAS", volume.shape))
    description = describe_dataset(str(write_dataset_json(tmp_path / "T1", "decathlon", CLASS_NAMES, ["T1"], names)))
    plan = plan_dataset(description, dataset_fingerprint(description), MODEL, Budget(1.0), 2)
    crop, normalization = plan["crop"], plan["normalization"]
    assert crop != "none"
    medians = []
    for case in description.labelled:
        loaded = load_case(eval_transforms(True, normalization=normalization, crop=crop), case_dicts([case])[0])
        z, labels = loaded["image"][0].numpy(), loaded["label"][0].numpy()
        medians.append([np.median(z[labels == tissue]) for tissue in (1, 2)])
    assert np.abs(np.subtract(*medians)).max() < 1e-3
    uncropped = [tissue_medians(volume, labels, normalization[0]) for volume, labels in
                 ((image, label), (np.pad(image, border), np.pad(label, border)))]
    assert np.abs(np.subtract(*uncropped)).max() > 0.05  # what the border did to the stored volumes' z-scores


def test_scanners_differ_in_scale_contrast_bias_and_noise():
    scanners = [draw_scanner(np.random.RandomState(seed)) for seed in range(12)]
    for field, spread in (("gain", 20.0), ("gamma", 1.5), ("bias", 2.0), ("noise", 2.0)):
        values = [getattr(s, field) for s in scanners]
        assert max(values) / min(values) > spread, field
    (quiet, label), (_, same_label) = head(QUIET), head(NOISY)
    assert np.array_equal(label, same_label) and np.array_equal(quiet, np.round(quiet)) and quiet.min() >= 0
