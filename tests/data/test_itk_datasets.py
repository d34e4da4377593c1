"""Datasets in nnU-Net's layout with file_ending .mha or .nrrd (the dicom extra) plan, check and
train as their NIfTI copy does."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import SimpleITK as sitk

from helpers.data import OBLIQUE_AFFINE, write_nnunet
from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config
from segnet.data.itk_files import set_affine
from segnet.errors import DatasetError
from segnet.planning.plan import plan_command


def as_itk(root, ending):
    """The NIfTI dataset at `root`, every file rewritten in the format of `ending` on its grid."""
    for path in sorted(root.glob("*Tr/*.nii.gz")):
        scan = nib.load(path)
        image = sitk.GetImageFromArray(np.moveaxis(np.asarray(scan.dataobj), [0, 2], [2, 0]))
        set_affine(image, scan.affine)
        sitk.WriteImage(image, str(path).replace(".nii.gz", ending))
        path.unlink()
    spec = json.loads((root / "dataset.json").read_text())
    (root / "dataset.json").write_text(json.dumps({**spec, "file_ending": ending}))
    return root


def planned(root, tmp_path, *overrides):
    return plan_command(compose_config([f"data.root={root}", f"data.cache_dir={tmp_path}/cache", *overrides],
                                       name="plan"))


def oblique_nnunet(root):
    root = write_nnunet(root)
    for path in root.glob("*Tr/*.nii.gz"):  # on an oblique grid: the plan sees it through the geometry
        scan = nib.load(path)
        nib.save(nib.Nifti1Image(np.asarray(scan.dataobj), OBLIQUE_AFFINE), str(path))
    return root


@pytest.mark.parametrize("ending", [".mha", ".nrrd"])
def test_an_itk_dataset_plans_as_its_nifti_copy_and_its_check_names_a_bad_label(tmp_path, ending):
    nifti = oblique_nnunet(tmp_path / "nifti")
    itk = as_itk(oblique_nnunet(tmp_path / "itk"), ending)
    plans = [planned(root, tmp_path / root.name, f"output={tmp_path / root.name}.json") for root in (nifti, itk)]
    assert plans[0]["configurations"] == plans[1]["configurations"]
    label = itk / "labelsTr" / f"tiny_001{ending}"
    broken = sitk.ReadImage(str(label))
    broken[0, 0, 0] = 7
    sitk.WriteImage(broken, str(label))
    with pytest.raises(DatasetError, match=rf"{label}: label values 7 are not classes of dataset\.json"):
        planned(itk, tmp_path / "verify", "verify=true")


def test_an_mha_dataset_trains_and_is_evaluated(tmp_path):
    from segnet.training.train import train

    root = as_itk(write_nnunet(tmp_path / "Dataset"), ".mha")
    run = tmp_path / "run"
    train(compose_config(["data=folder", f"data.root={root}", "data.num_folds=3", "data.num_workers=0", "op=python",
                          "data.steps_per_epoch=2", "data.patch_size=[16,16,16]", "data.batch_size=1",
                          *TINY_MODEL, *TINY_TRAINER], output_dir=run))
    metrics = json.loads((run / "metrics.json").read_text())
    assert list(metrics["val_dice_per_class"]) == ["core", "shell"] and 0 <= metrics["val_dice_mean"] <= 1
