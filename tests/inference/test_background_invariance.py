"""One model's prediction of a scan does not depend on how much background surrounds the anatomy:
the same head stored in a wider field of noise, padded with zeros or cut close gets the same label
map inside the head, because loading crops it to the same body box before normalizing
(segnet.data.cropping) and the network sees the same windows. Without the crop it does not."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from helpers.data import head_in_noise
from segnet.data.cropping import crop_box
from segnet.data.dataset_json import Case
from segnet.inference.ensemble import Predictor
from segnet.inference.prediction_writer import PredictionWriter
from segnet.inference.trained_model import TrainedModel
from segnet.metrics import dice_per_class
from segnet.model.network import build_network

FIELD = (192, 192)
MODEL = {"spatial_dims": 2, "in_channels": 1, "out_channels": 3, "channels": [8, 16, 32], "strides": [2, 2],
         "num_res_units": 1, "encoder_blocks": None, "norm": "instance", "act": "prelu", "dropout": 0.0,
         "edge_placement": ["input", "skips"], "edge_alpha_init": 0.1, "edge_alpha_trainable": True,
         "skip_layer": "edge", "deep_supervision": False, "stem": "residual"}


def plan(crop: str) -> dict:
    """A 2D run's data settings as the plan of a T1 dataset with noise backgrounds gives them."""
    return {"spatial_dims": 2, "in_channels": 1, "num_classes": 3, "ignore_label": None,
            "class_names": ["background", "grey_matter", "white_matter"],
            "normalization": [{"channel": "T1", "scheme": "zscore", "nonzero": False}], "orientation": "RAS",
            "spacing": [1.0, 1.0, 0.0], "crop": crop}


@dataclass(frozen=True)
class Scans:
    files: dict[str, tuple[Path, tuple[int, int]]]  # each form's file, where the stored field's first voxel lies in it
    head: tuple[slice, slice]  # the head's box in the stored field, in plane
    label: np.ndarray  # the stored field's


@pytest.fixture(scope="module")
def scans(tmp_path_factory) -> Scans:
    """The head as stored, in a wider field of noise, with a zero border and cut three voxels
    around its box."""
    image, label = head_in_noise(FIELD)
    (top, left, _), (bottom, right, _) = crop_box(image[None], "body")
    air = np.random.default_rng(1).choice(image[:16, :16].ravel(), size=(300, 280, image.shape[2]))
    wide = air.astype(np.float32)
    wide[50:242, 70:262] = image
    forms = {"stored": (image, (0, 0)), "wide noise": (wide, (50, 70)),
             "zero border": (np.pad(image, [(17, 9), (30, 4), (0, 0)]), (17, 30)),
             "cut close": (image[top - 3: bottom + 3, left - 3: right + 3], (3 - top, 3 - left))}
    folder = tmp_path_factory.mktemp("fields")
    files = {}
    for name, (volume, origin) in forms.items():
        files[name] = (folder / f"{name.replace(' ', '_')}.nii.gz", origin)
        nib.save(nib.Nifti1Image(volume, np.diag([1.0, 1.0, 4.0, 1.0])), files[name][0])
    return Scans(files, (slice(top, bottom), slice(left, right)), label)


def writer_of(crop: str, out: Path, save_probabilities: bool = False) -> PredictionWriter:
    """A prediction writer of one network with random weights that loads as `crop` says."""
    torch.manual_seed(4)  # a network whose label map in the head holds all three classes
    model = TrainedModel(build_network(MODEL, "python"), plan(crop), {"roi_size": [64, 64], "sw_batch_size": 4,
                                                                       "overlap": 0.5}, torch.device("cpu"))
    return PredictionWriter(Predictor([model], tta=False), out, save_probabilities=save_probabilities)


def label_maps(scans: Scans, crop: str, out) -> dict[str, np.ndarray]:
    """Each form's label map on the stored field's grid inside the head's box."""
    writer = writer_of(crop, out)
    maps = {}
    for name, (file, (row, column)) in scans.files.items():
        predicted = writer.run_case(Case(name, (str(file),), None)).label_map
        rows, columns = scans.head
        maps[name] = predicted[row + rows.start: row + rows.stop, column + columns.start: column + columns.stop]
    return maps


def test_the_label_map_inside_the_head_is_the_same_whatever_surrounds_it(scans, tmp_path):
    maps = label_maps(scans, "body", tmp_path)
    head = scans.label[scans.head] > 0
    shares = np.bincount(maps["stored"][head], minlength=3) / head.sum()
    assert shares.min() > 0.1  # not a map that could not differ
    for name, predicted in maps.items():
        dice = dice_per_class(torch.from_numpy(predicted), torch.from_numpy(maps["stored"]), [(1,), (2,)])
        assert min(dice) > 0.995, name


def test_without_the_crop_the_air_around_the_head_changes_its_label_map(scans, tmp_path):
    maps = label_maps(scans, "none", tmp_path)
    agreement = [(maps[name] == maps["stored"]).mean() for name in ("wide noise", "zero border", "cut close")]
    assert max(agreement) < 0.95


def test_outside_the_box_the_saved_probabilities_are_background(scans, tmp_path):
    file, (row, column) = scans.files["wide noise"]
    writer_of("body", tmp_path, save_probabilities=True).run_case(Case("wide", (str(file),), None))
    probabilities = np.load(tmp_path / "wide.npz")["probabilities"]
    assert probabilities.shape[1:3] == (300, 280)
    np.testing.assert_allclose(probabilities.sum(0), 1, atol=1e-5)  # a distribution in every voxel
    outside = probabilities[:, :row + scans.head[0].start]  # the rows above the head's box
    assert (outside[0] == 1).all() and (outside[1:] == 0).all()


def test_a_model_whose_plan_named_no_crop_is_one_configuration_with_one_that_crops_nothing():
    older = {key: value for key, value in plan("none").items() if key != "crop"}  # its checkpoint has no crop
    network = build_network(MODEL, "python")
    models = {crop: TrainedModel(network, data, {"roi_size": [64, 64]}, torch.device("cpu"))
              for crop, data in (("unset", older), ("none", plan("none")), ("body", plan("body")))}
    assert len(Predictor([models["unset"], models["none"]]).configurations) == 1
    assert len(Predictor([models["unset"], models["body"]]).configurations) == 2
