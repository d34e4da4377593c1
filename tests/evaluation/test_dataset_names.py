"""segnet-evaluate scores a checkpoint only on a dataset that names its channels and classes as
the checkpoint's run did, in the same order (segnet.inference.names): with the counts alone,
summary.json would report each class's scores under another class's name."""

from __future__ import annotations

import re

import pytest

from helpers.checkpoints import MODEL_3D, rename_in_dataset_json, run_data, write_checkpoint
from helpers.data import write_decathlon
from helpers.training import compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.errors import ConfigError
from segnet.evaluation.evaluate import evaluate
from segnet.evaluation.evaluator import check_compatible
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
        evaluate(cfg)
    assert not (tmp_path / "eval" / "summary.json").exists()
