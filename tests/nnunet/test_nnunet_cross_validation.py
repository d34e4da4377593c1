"""A fold of an nnU-Net v2 model beside segnet's runs in segnet-find-best-configuration and
segnet-export-model (runs=[<its fold_N folder or checkpoint>]): grouped as its configuration,
scored on its fold's validation cases, and packaged as a run's checkpoint that predicts as
nnUNetPredictor does."""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest

from helpers.checkpoints import MODEL_3D, run_data, write_checkpoint
from helpers.training import compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.export.export_model import export_model_command
from segnet.inference.predict import predict_command
from segnet.postprocessing.find_best import find_best_command, read_runs


@pytest.fixture(autouse=True)
def models_home(tmp_path, monkeypatch):
    """Packages unpacked in the test's folder, not in the user's ~/.cache."""
    monkeypatch.setenv("SEGNET_MODELS", str(tmp_path / "unpacked"))


def test_an_nnunet_fold_is_a_run_of_its_configuration_beside_segnet_s(nnunet_model, tmp_path):
    dataset = describe_dataset(str(nnunet_model.base / "raw" / "Dataset901_Tiny"))
    segnet_run = tmp_path / "3d_fold0"
    write_checkpoint(segnet_run / "checkpoints" / "final.ckpt", MODEL_3D, {**run_data(), "fold": 0})
    fold = nnunet_model.folder / "fold_0"
    for given in (fold, nnunet_model.checkpoint):
        grouped, left_out = read_runs([segnet_run, given], "final.ckpt", dataset)
        assert {name: sorted(by_fold) for name, by_fold in grouped.items()} == {"3d": ["0"], "3d_fullres": ["0"]}
        assert grouped["3d_fullres"]["0"].checkpoint == nnunet_model.checkpoint and left_out == {}


def test_find_best_scores_an_nnunet_fold_and_its_package_predicts_as_nnunet_does(nnunet_model, tmp_path):
    fold = nnunet_model.folder / "fold_0"
    result = find_best_command(compose_config(
        [f"data.root={nnunet_model.base / 'raw' / 'Dataset901_Tiny'}", f"runs=[{fold}]", "tta=false", "op=python",
         "device=cpu"], output_dir=tmp_path / "best", name="find_best"))
    assert result["best"] == "3d_fullres" and result["runs"] == {"3d_fullres": {"0": str(fold.resolve())}}
    assert result["means"]["3d_fullres"]["Dice"] > 0.9  # its own fold's validation cases, predicted by its weights
    package = tmp_path / "model.zip"
    manifest = export_model_command(compose_config([f"choice={tmp_path / 'best' / 'best_configuration.json'}",
                                                    f"output={package}"], name="export_model"))
    assert [(m["configuration"], m["fold"]) for m in manifest["models"]] == [("3d_fullres", 0)]
    predict_command(compose_config([f"exported={package}", f"input={nnunet_model.test_images}",
                                    f"output={tmp_path / 'out'}", "num_workers=0", "device=cpu", "op=python"],
                                   name="predict"))
    for case in ("test0", "test1"):
        ours = np.asarray(nib.load(tmp_path / "out" / f"{case}.nii.gz").dataobj)
        reference = np.asarray(nib.load(nnunet_model.predictions / f"{case}.nii.gz").dataobj)
        assert (ours == reference).mean() >= 0.99, case
