"""segnet-evaluate scores a checkpoint only on a dataset that names its channels and classes as
the checkpoint's run did, in the same order (segnet.inference.names): with the counts alone,
summary.json would report each class's scores under another class's name."""

from __future__ import annotations

import json
import re

import pytest

from helpers.checkpoints import MODEL_3D, rename_in_dataset_json, run_data, write_checkpoint
from helpers.data import write_decathlon
from helpers.training import compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.data.regions import Regions
from segnet.errors import ConfigError
from segnet.evaluation.evaluate import evaluate_command
from segnet.evaluation.evaluator import check_compatible
from segnet.generated.tumour import CHANNELS, write_tumour_dataset
from segnet.inference.loading import load_checkpoint
from segnet.inference.names import Names, check_same_names


def test_names_in_another_order_are_refused_with_both_lists():
    trained = Names(("CT",), ("background", "tube", "blob"), "run.ckpt")
    check_same_names(trained, Names(("CT",), ("background", "tube", "blob"), "dataset.json"), "advice")
    with pytest.raises(ConfigError, match=re.escape(
            "classes ['background', 'blob', 'tube'] in dataset.json but ['background', 'tube', 'blob'] in run.ckpt "
            "(the same names in the same order are needed): advice")):
        check_same_names(trained, Names(("CT",), ("background", "blob", "tube"), "dataset.json"), "advice")
    with pytest.raises(ConfigError, match=re.escape("channels ['MRI'] in dataset.json but ['CT'] in run.ckpt (")):
        check_same_names(trained, Names(("MRI",), ("background", "blob", "tube"), "dataset.json"), "advice",
                         kinds=("channels",))
    with pytest.raises(ConfigError, match=re.escape("channels ['MRI'] in dataset.json but none (generated data)")):
        check_same_names(Names(None, trained.classes, "run.ckpt"), Names(("MRI",), trained.classes, "dataset.json"),
                         "advice")


def test_a_dataset_named_as_the_checkpoints_run_is_scored(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoints" / "best.ckpt"
    write_checkpoint(checkpoint, MODEL_3D, run_data())
    description = describe_dataset(str(write_decathlon(tmp_path / "Task", cases=2)))
    check_compatible(load_checkpoint(checkpoint, backend="python"), description, checkpoint)


@pytest.mark.parametrize("renamed,refused", [
    ({"classes": ("background", "shell", "core")}, "classes ['background', 'shell', 'core'] in {json} but "
                                                   "['background', 'core', 'shell'] in {ckpt}"),
    ({"channels": ("CT",)}, "channels ['CT'] in {json} but ['MRI'] in {ckpt}"),
])
def test_evaluate_refuses_a_dataset_named_otherwise_before_it_writes_anything(tmp_path, renamed, refused):
    checkpoint = tmp_path / "run" / "checkpoints" / "best.ckpt"
    write_checkpoint(checkpoint, MODEL_3D, run_data())  # trained on background, core, shell of one MRI channel
    root = rename_in_dataset_json(write_decathlon(tmp_path / "Renamed", cases=2), **renamed)
    cfg = compose_config([f"data.root={root}", f"ckpt_path={checkpoint}", "data.split=all", "op=python",
                          "device=cpu"], output_dir=tmp_path / "eval", name="evaluate")
    with pytest.raises(ConfigError, match=re.escape(refused.format(json=root / "dataset.json", ckpt=checkpoint))):
        evaluate_command(cfg)
    assert not (tmp_path / "eval" / "summary.json").exists()


BRATS = Regions(values=((1, 2, 3), (2, 3), (3,)), class_order=(1, 2, 3))  # nnU-Net's conversion of BraTS


def test_regions_over_other_label_values_are_refused_region_by_region():
    names = ("background", "whole", "core", "enhancing")
    trained = Names(("T1",), names, "run.ckpt", BRATS)
    check_same_names(trained, Names(("T1",), names, "dataset.json", BRATS), "advice")
    other_order = Regions(BRATS.values, (1, 2, 2))
    with pytest.raises(ConfigError, match=re.escape(
            "region enhancing is written as label value 2 (regions_class_order) in dataset.json but 3 in run.ckpt "
            "(the same label values in each region are needed): advice")):
        check_same_names(trained, Names(("T1",), names, "dataset.json", other_order), "advice")
    with pytest.raises(ConfigError, match=re.escape(
            "regions none (a class per label value) in dataset.json but [[1, 2, 3], [2, 3], [3]] "
            "(regions_class_order [1, 2, 3]) in run.ckpt")):
        check_same_names(trained, Names(("T1",), names, "dataset.json"), "advice")


def test_a_region_model_is_refused_on_a_dataset_that_numbers_its_regions_otherwise(tmp_path):
    # trained on nnU-Net's BraTS values (3 = enhancing), given BraTS 2021's (4 = enhancing): a
    # perfect prediction would score the whole tumour alone
    checkpoint = tmp_path / "run" / "checkpoints" / "best.ckpt"
    classes = ("background", "whole_tumor", "tumor_core", "enhancing_tumor")
    write_checkpoint(checkpoint, {**MODEL_3D, "in_channels": len(CHANNELS), "out_channels": 3},
                     {**run_data(classes, CHANNELS), "regions": BRATS.settings()})
    root = write_tumour_dataset(tmp_path / "Tumour", cases=2, size=16)
    spec = json.loads((root / "dataset.json").read_text())
    spec.update(labels={"background": 0, "whole_tumor": [1, 2, 4], "tumor_core": [1, 4], "enhancing_tumor": 4},
                regions_class_order=[2, 1, 4])
    (root / "dataset.json").write_text(json.dumps(spec))
    model = load_checkpoint(checkpoint, backend="python")
    with pytest.raises(ConfigError, match=re.escape(
            f"region enhancing_tumor covers label values [4] in {root}/dataset.json but [3] in {checkpoint}; "
            f"region enhancing_tumor is written as label value 4 (regions_class_order) in {root}/dataset.json but 3 "
            f"in {checkpoint} (the same label values in each region are needed): score on a dataset")):
        check_compatible(model, describe_dataset(str(root)), checkpoint)
