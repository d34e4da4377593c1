"""segnet-predict with an nnU-Net v2 trained model folder (segnet.nnunet): nnU-Net's own label maps,
its checkpoints read weights-only, and what is refused."""

from __future__ import annotations

import pathlib
import shutil

import nibabel as nib
import numpy as np
import pytest
import torch

from helpers.training import compose_config
from segnet.checkpoints.reading import CheckpointError
from segnet.errors import ConfigError
from segnet.inference.predict import predict_command


def predict(model: str, images, output, *overrides: str):
    # model= reaches the configuration as `exported`, as segnet-predict's command line rewrites it
    return predict_command(compose_config([f"exported={model}", f"input={images}", f"output={output}", "tta=false",
                                           "num_workers=0", "device=cpu", *overrides], name="predict"))


def label_map(path) -> np.ndarray:
    return np.asarray(nib.load(path).dataobj)


def test_label_maps_are_nnunet_predictors(nnunet_model, tmp_path):
    """The same voxels as nnUNetPredictor's on the same images and fold (unmirrored), through a plan
    that transposes the stored axes, crops a zero border and z-scores: at least 99 % of each case's
    voxels, and each class a part of them (a model that learnt nothing would agree on background)."""
    predictions = predict(str(nnunet_model.folder), nnunet_model.test_images, tmp_path / "out")
    assert sorted(p.case.name for p in predictions) == ["test0", "test1"]
    for case in ("test0", "test1"):
        reference = label_map(nnunet_model.predictions / f"{case}.nii.gz")
        ours = label_map(tmp_path / "out" / f"{case}.nii.gz")
        assert ours.shape == reference.shape
        assert (ours == reference).mean() >= 0.99, case
        assert np.bincount(reference.ravel(), minlength=3).min() > 200, "the model must have learnt both blobs"


def test_folds_name_the_folder_s_checkpoints_and_a_missing_one_is_named(nnunet_model, tmp_path):
    with pytest.raises(ConfigError, match=r"folds=\[3\]: .*fold_3/checkpoint_final.pth missing; .* has fold_0"):
        predict(str(nnunet_model.folder), nnunet_model.test_images, tmp_path / "out", "folds=[3]")


def test_a_checkpoint_holding_another_type_is_refused_naming_file_and_type(nnunet_model, tmp_path):
    folder = tmp_path / nnunet_model.folder.name
    shutil.copytree(nnunet_model.folder, folder)
    checkpoint = folder / "fold_0" / "checkpoint_final.pth"
    saved = torch.load(checkpoint, weights_only=False)  # our own file: trusted
    saved["extra"] = pathlib.PurePosixPath("anything")  # stands for any pickled class instance
    torch.save(saved, checkpoint)
    with pytest.raises(CheckpointError, match=r"checkpoint_final\.pth holds .* \(it holds pathlib\.PurePosixPath\)"):
        predict(str(folder), nnunet_model.test_images, tmp_path / "out")


def test_a_plan_naming_classes_outside_the_network_packages_is_refused(tmp_path):
    from segnet.nnunet.architecture import build_nnunet_network

    architecture = {"network_class_name": "dynamic_network_architectures.architectures.unet.PlainConvUNet",
                    "arch_kwargs": {"nonlin": "subprocess.Popen"}, "_kw_requires_import": ["nonlin"]}
    with pytest.raises(ConfigError, match=r"names subprocess\.Popen; .* under torch\.nn\. only"):
        build_nnunet_network(architecture, 1, 2, False, tmp_path / "plans.json")
    architecture["network_class_name"] = "os.system"
    with pytest.raises(ConfigError, match=r"names os\.system; .* under dynamic_network_architectures"):
        build_nnunet_network(architecture, 1, 2, False, tmp_path / "plans.json")


@pytest.mark.parametrize(("transpose", "spacing", "stored", "loaded"), [
    ([0, 1, 2], [3.0, 1.0, 2.0], [2.0, 1.0, 3.0], [0, 1, 2]),  # nnU-Net's order is the stored one reversed
    ([2, 0, 1], [3.0, 2.0, 1.0], [3.0, 1.0, 2.0], [1, 2, 0]),
    ([0, 1, 2], [2.0, 1.0], [1.0, 2.0, 0.0], [0, 1, 2]),  # 2D: the slicing axis kept as stored
])
def test_the_plan_s_spacing_and_axes_are_put_into_the_stored_order(transpose, spacing, stored, loaded):
    from segnet.nnunet.plans import loaded_axes, stored_spacing

    assert stored_spacing(spacing, transpose) == stored
    assert loaded_axes(transpose) == loaded
