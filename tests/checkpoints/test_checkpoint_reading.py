"""Every checkpoint is read through segnet.checkpoints.reading: one from elsewhere (without the
hyperparameters segnet's training saves) is refused in one line that names the file, whichever
command reads it, and an older segnet's checkpoint reads as a run records it now."""

from __future__ import annotations

import pytest
import torch

from segnet.checkpoints.reading import CheckpointError, as_saved_now, run_settings, saved_data, saved_hyperparameters
from segnet.checkpoints.settings import Geometry, RunSettings
from segnet.inference.loading import load_checkpoint
from segnet.postprocessing.cross_validation import cross_validation_runs


@pytest.fixture(params=["state_dict", "lightning_without_hyperparameters"])
def foreign_checkpoint(request, tmp_path):
    """A torchvision-style bare state dict, or a Lightning checkpoint of another project."""
    weights = {"conv.weight": torch.zeros(2, 1, 3, 3)}
    saved = weights if request.param == "state_dict" else {"state_dict": weights, "global_step": 3}
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    torch.save(saved, folder / "final.ckpt")
    return folder / "final.ckpt"


@pytest.mark.parametrize("read", [saved_hyperparameters, saved_data, run_settings, load_checkpoint,
                                  lambda path: cross_validation_runs([path.parent.parent], path.name, None, "usage")])
def test_a_foreign_checkpoint_is_refused_in_one_line_naming_it(read, foreign_checkpoint):
    with pytest.raises(CheckpointError) as refused:
        read(foreign_checkpoint)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{foreign_checkpoint} is not a checkpoint of segnet's training")
    assert "checkpoints/final.ckpt" in message  # what to give instead


def test_an_older_checkpoints_settings_read_as_it_trained():
    older = {"spatial_dims": 3, "class_names": ["background", "core"], "in_channels": 1, "plan": {"orientation": "LPS"}}
    settings = RunSettings.from_data(older)
    assert settings.configuration == "3d"  # before the plan named one: its spatial dims'
    assert settings.geometry == Geometry(normalization=None, orientation="RAS", spacing=None, crop=None)
    assert settings.plan_key() == RunSettings.from_data({**older, "crop": "none", "orientation": "RAS"}).plan_key()


def test_an_older_checkpoints_hyperparameters_read_as_a_run_records_them_now():
    older = {"model": {"channels": [8]}, "data": {"spatial_dims": 2, "plan": {}}}
    recorded = {"model.stem", "data.crop"}  # this run records these, not the foreground share
    assert as_saved_now(older, recorded) == {"model": {"channels": [8], "stem": "residual"},
                                             "data": {"spatial_dims": 2, "plan": {}, "configuration": "2d",
                                                      "crop": "none"}}
    assert older == {"model": {"channels": [8]}, "data": {"spatial_dims": 2, "plan": {}}}  # left as read


def test_generated_datas_patch_saved_as_roi_size_reads_as_patch_size():
    older = {"data": {"spatial_dims": 2, "roi_size": [96, 96]}}
    assert as_saved_now(older, set()) == {"data": {"spatial_dims": 2, "patch_size": [96, 96]}}
    folder_run = {"data": {"spatial_dims": 3, "patch_size": [64, 64, 48], "roi_size": [64, 64, 48]}}
    assert as_saved_now(folder_run, set()) == {"data": {"spatial_dims": 3, "patch_size": [64, 64, 48]}}
