"""The plan's configurations (nnU-Net's): 3d_lowres (and with it the cascade) where the
full-resolution patch covers less than a quarter of the median image, and not at or above it;
data.configuration trains the one named, predicting in its own plan back onto each image's grid."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import torch

from helpers.data import write_decathlon
from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config
from segnet.errors import ConfigError
from segnet.inference.predict import predict_command
from segnet.planning.planner import LOWRES_COVERAGE, Budget, Dataset, coverage, lowres_configuration

MODEL = {"channels": [8, 16], "strides": [2], "num_res_units": 1, "norm": "instance", "act": "prelu",
         "dropout": 0.0, "edge_placement": ["input", "skips"], "edge_alpha_init": 0.1}
DATASET = Dataset(in_channels=1, num_classes=3, voxels=1e9)


def lowres(median_shape, spacing=(1.0, 1.0, 1.0), patch=(64, 64, 64)):
    return lowres_configuration(MODEL, np.array(median_shape, float), np.array(spacing), {"patch_size": list(patch)},
                                Budget(0.02), DATASET, 2)


def test_3d_lowres_is_planned_below_a_quarter_of_the_median_image_and_not_at_it():
    assert coverage([64, 64, 64], [128, 128, 64]) == LOWRES_COVERAGE
    assert lowres([128, 128, 64]) is None  # exactly a quarter
    planned = lowres([128, 128, 65])  # a hair under
    assert planned is not None and min(planned["spacing"]) > 1.0
    assert coverage(planned["patch_size"], planned["median_shape"]) >= LOWRES_COVERAGE
    assert "under nnU-Net's 25%" in planned["why"]


def test_the_axes_finer_than_half_the_coarsest_are_coarsened_first():
    # 0.5 x 0.5 x 3 mm: the in-plane axes alone coarsen until they are within a factor 2 of the
    # slices; from there every axis does (coarsening all from the start would keep a factor 6)
    planned = lowres([400, 400, 40], spacing=(0.5, 0.5, 3.0))
    x, y, z = planned["spacing"]
    assert x == y and z > 3.0 and 1.9 < z / x <= 2.0


@pytest.mark.slow
def test_a_run_trains_the_lowres_configuration_and_predicts_onto_the_image_grid(tmp_path):
    from segnet.training.train import train

    root = write_decathlon(tmp_path / "Task", cases=3)
    common = ["data=folder", f"data.root={root}", "data.num_folds=3", "data.num_workers=0", "op=python",
              "data.memory_budget_gb=0.0001", "data.steps_per_epoch=1", *TINY_MODEL, *TINY_TRAINER]
    run = tmp_path / "run"
    train(compose_config([*common, "data.configuration=3d_lowres"], output_dir=run))
    plan = json.loads((run / "plans.json").read_text())
    assert list(plan["configurations"]) == ["2d", "3d", "3d_lowres", "3d_cascade_fullres"]
    lowres_plan = plan["configurations"]["3d_lowres"]
    data = torch.load(run / "checkpoints" / "final.ckpt", weights_only=True)["hyper_parameters"]["data"]
    assert data["configuration"] == "3d_lowres" and data["spatial_dims"] == 3
    assert data["spacing"] == lowres_plan["spacing"] and data["spacing"] > plan["configurations"]["3d"]["spacing"]
    image = root / "imagesTr" / "case_000.nii.gz"
    predict_command(compose_config([f"ckpt_path={run}/checkpoints/final.ckpt", f"input={image}",
                                    f"output={tmp_path / 'out'}", "op=python"], name="predict"))
    written = nib.load(tmp_path / "out" / "case_000.nii.gz")
    assert written.shape == nib.load(image).shape and np.allclose(written.affine, nib.load(image).affine)
    with pytest.raises(ConfigError, match=r"data.configuration=3d_midres: the plan of .* has 2d, 3d, "
                                          r"3d_lowres, 3d_cascade_fullres; train one of those"):
        train(compose_config([*common, "data.configuration=3d_midres"], output_dir=tmp_path / "other"))
