"""Postprocessing decided on the cross-validation (segnet-postprocess) and applied by prediction and
evaluation: the largest connected component of the foreground or of a class is kept only where it
raises the mean Dice; the rules travel in the run folder's postprocessing.json."""

from __future__ import annotations

import json
import re
import shutil

import nibabel as nib
import numpy as np
import pytest
import torch
from scipy import ndimage

from helpers.checkpoints import MODEL_3D, rename_in_dataset_json, run_data, write_checkpoint
from helpers.data import write_decathlon
from helpers.training import compose_config
from segnet.data.regions import Regions
from segnet.errors import ConfigError
from segnet.evaluation.evaluate import evaluate_command
from segnet.evaluation.evaluator import Evaluator
from segnet.inference.component_rules import FILE, NONE, Rules, case_scores, read_rules, rules_for, unit_dice
from segnet.postprocessing.decide import decide, decide_regions
from segnet.postprocessing.postprocess import postprocess_command


def two_class_case() -> tuple[np.ndarray, np.ndarray]:
    """A 2D case: class 1 one square in the reference, predicted with a stray 2 x 2 island; class
    2 two separate squares in the reference, both predicted."""
    reference = np.zeros((20, 20), np.uint8)
    reference[2:6, 2:6] = 1                   # 16 voxels of class 1
    reference[12:15, 2:5] = 2                 # 9 + 9 voxels of class 2, apart
    reference[12:15, 15:18] = 2
    prediction = reference.copy()
    prediction[16:18, 9:11] = 1               # 4 stray voxels of class 1
    return prediction, reference


def test_the_rules_keep_the_largest_component_of_the_foreground_or_of_a_class():
    prediction, _ = two_class_case()
    by_class = Rules(classes=(1,)).apply(prediction)
    assert (by_class[16:18, 9:11] == 0).all() and (by_class[2:6, 2:6] == 1).all() and (by_class == 2).sum() == 18
    foreground = Rules(foreground=True).apply(prediction)  # the largest of all foreground together: class 1's square
    assert (foreground == 1).sum() == 16 and (foreground == 2).sum() == 0
    assert np.array_equal(NONE.apply(prediction), prediction)


def test_a_rule_is_kept_only_where_it_raises_the_mean_dice():
    prediction, reference = two_class_case()
    scores = case_scores(prediction, reference, 3)
    assert scores["none"] == pytest.approx([2 * 16 / (20 + 16), 1.0])
    assert scores["classes"] == pytest.approx([1.0, 2 * 9 / (9 + 18)])  # class 2 loses a square
    assert scores["foreground"] == pytest.approx([1.0, 0.0])
    rules, means = decide([scores, scores])
    assert rules == Rules(foreground=False, classes=(1,))  # class 1's island goes; class 2 keeps both squares
    assert means["chosen"] == pytest.approx([1.0, 1.0])
    assert decide([case_scores(reference, reference, 3)])[0] == NONE  # a tie changes nothing


BRATS = Regions(values=((1, 2, 3), (2, 3), (3,)), class_order=(1, 2, 3))


def two_tumour_case(stray_value: int) -> tuple[np.ndarray, np.ndarray]:
    """A 2D case of BraTS's regions: a big tumour (whole 64 voxels, core 36, enhancing 4) and a
    small one apart (16 voxels of value 1), predicted with stray voxels: 2 enhancing ones inside
    the big tumour's core (stray_value 3), or 4 core ones inside the small tumour (2)."""
    reference = np.zeros((20, 20), np.uint8)
    reference[2:10, 2:10] = 1
    reference[3:9, 3:9] = 2
    reference[4:6, 4:6] = 3
    reference[14:18, 14:18] = 1
    prediction = reference.copy()
    if stray_value == 3:
        prediction[7:9, 7] = 3
    else:
        prediction[15:17, 15:17] = 2
    return prediction, reference


def decided_for_regions(prediction: np.ndarray, reference: np.ndarray):
    """decide_regions on one case: the rules, the means, and the rules it tried, in order."""
    tried = []

    def rescore(rules):
        tried.append(rules)
        return [unit_dice(rules.apply(prediction), reference, BRATS.values)]

    rules, means = decide_regions([case_scores(prediction, reference, 4, regions=BRATS)], BRATS,
                                  ["whole", "core", "enhancing"], rescore)
    return rules, means, tried


def test_a_region_s_rule_is_tried_on_top_of_those_kept_and_changes_the_regions_it_shares_values_with(tmp_path):
    prediction, reference = two_tumour_case(stray_value=3)
    scores = case_scores(prediction, reference, 4, regions=BRATS)
    assert set(scores) == {"none", "foreground"}
    assert scores["none"] == pytest.approx([1.0, 1.0, 2 * 4 / (6 + 4)])
    assert scores["foreground"] == pytest.approx([2 * 64 / (64 + 80), 1.0, 0.8])  # the small tumour goes
    rules, means, tried = decided_for_regions(prediction, reference)
    # the foreground's rule loses the small tumour; the whole tumour's does too; the core is one
    # component; the enhancing tumour's drops the stray voxels to background, out of the core and
    # the whole tumour too
    assert tried == [Rules(regions=((1, 2, 3),)), Rules(regions=((2, 3),)), Rules(regions=((3,),))]
    assert rules == Rules(regions=((3,),))
    assert means["largest component of whole"] == pytest.approx([2 * 64 / (64 + 80), 1.0, 0.8])
    assert means["chosen"] == pytest.approx([2 * 78 / (78 + 80), 2 * 34 / (34 + 36), 1.0])
    (tmp_path / FILE).write_text(json.dumps(rules.to_json()))
    assert read_rules(tmp_path / FILE) == rules
    # the core's rule kept (its stray island in the small tumour goes), the enhancing tumour's is
    # tried on top of it
    rules, means, tried = decided_for_regions(*two_tumour_case(stray_value=2))
    assert tried == [Rules(regions=((1, 2, 3),)), Rules(regions=((2, 3),)), Rules(regions=((2, 3), (3,)))]
    assert rules == Rules(regions=((2, 3),))
    assert means["chosen"] == pytest.approx([2 * 76 / (76 + 80), 1.0, 1.0])


def test_the_rules_are_found_beside_the_checkpoints_and_must_agree(tmp_path):
    one, other = tmp_path / "fold0", tmp_path / "fold1"
    for folder in (one, other):
        folder.mkdir()
    (one / FILE).write_text(json.dumps(Rules(True, (2,)).to_json()))
    assert rules_for("auto", [one]) == Rules(True, (2,))
    assert rules_for("none", [one]) == NONE and rules_for("auto", [other]) == NONE
    with pytest.raises(ConfigError, match="different postprocessing.json"):
        rules_for("auto", [one, other])
    (other / FILE).write_text("{}")
    with pytest.raises(ConfigError, match="is not a postprocessing file of segnet-postprocess"):
        read_rules(other / FILE)


def class_components(folder, label: int) -> list[int]:
    """How many connected components of `label` each label map in `folder` holds."""
    return [ndimage.label(np.asarray(nib.load(path).dataobj) == label, np.ones((3, 3, 3)))[1]
            for path in sorted(folder.glob("*.nii.gz"))]


@pytest.mark.slow
def test_postprocess_decides_on_the_validation_cases_and_evaluation_applies_it(trained_3d, tmp_path, monkeypatch):
    root = trained_3d.root
    run = shutil.copytree(trained_3d.run, tmp_path / "run")  # the rules are written into the run folder
    record = postprocess_command(compose_config([f"data.root={root}", f"runs=[{run}]", "checkpoint=last.ckpt",
                                                 "tta=false", "op=cpp"], output_dir=tmp_path / "decided",
                                                name="postprocess"))
    assert json.loads((run / FILE).read_text()) == record == json.loads((tmp_path / "decided" / FILE).read_text())
    decided_on = sorted(path.name.removesuffix(".nii.gz") for path in (tmp_path / "decided" / "run_0").glob("*.nii.gz"))
    assert record["decided_on"]["cases"] == len(decided_on) > 0
    assert record["decided_on"]["case_names"] == decided_on

    # Evaluation with the run's rules (auto) and without: every prediction gets a stray class-1
    # island in a corner, which keeping class 1's largest component removes.
    (run / FILE).write_text(json.dumps({**record, **Rules(classes=(1,)).to_json()}))
    predict = Evaluator.predict

    def with_an_island(self, image, configuration):
        probabilities = predict(self, image, configuration).clone()
        probabilities[:, :2, :2, :2] = 0
        probabilities[1, :2, :2, :2] = 1
        return probabilities

    monkeypatch.setattr(Evaluator, "predict", with_an_island)
    for given, temperature in (("auto", 1), ("none", 2)):
        evaluate_command(compose_config([f"data.root={root}", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
                                         "op=cpp", f"postprocessing={given}", f"temperature={temperature}"],
                                        output_dir=tmp_path / given,
                                        name="evaluate"))
    assert set(class_components(tmp_path / "auto" / "predictions", 1)) == {1}
    assert min(class_components(tmp_path / "none" / "predictions", 1)) >= 2
    # Each summary says what it scored; the rules were chosen on these very cases, so the score
    # with them is marked optimistic and the score without them is beside it.
    ruled, plain = (json.loads((tmp_path / given / "summary.json").read_text()) for given in ("auto", "none"))
    assert ruled["evaluated"]["checkpoint"] == str((run / "checkpoints" / "last.ckpt").resolve())
    assert ruled["evaluated"]["step"] == torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    assert ruled["evaluated"]["tta"] is True and ruled["evaluated"]["split"] == "validation"
    origin = ruled["evaluated"]["postprocessing"]
    assert origin["rules"] == Rules(classes=(1,)).to_json() and origin["files"] == [str((run / FILE).resolve())]
    assert origin["optimistic"] is True and origin["decided_on_cases"] == decided_on
    assert ruled["without_postprocessing"]["foreground_mean"] == plain["foreground_mean"]
    assert ruled["foreground_mean"]["Dice"] > plain["foreground_mean"]["Dice"]
    assert plain["evaluated"]["postprocessing"]["optimistic"] is False and "without_postprocessing" not in plain
    # the probabilities' calibration, before the rules, and its picture; a temperature changes it, not the labels
    # (the Dice without the rules above is the same)
    assert plain["evaluated"]["temperature"] == 2 and 0 < plain["calibration"]["foreground"]["ECE"] < 0.5
    assert ruled["calibration"]["foreground"]["Brier"] != plain["calibration"]["foreground"]["Brier"]
    assert set(plain["calibration"]["per_class"]) == {"1", "2"} and (tmp_path / "none" / "reliability.png").is_file()


def test_a_dataset_that_numbers_the_classes_otherwise_is_refused_before_anything_is_decided(tmp_path):
    run = tmp_path / "run"
    checkpoint = run / "checkpoints" / "final.ckpt"
    write_checkpoint(checkpoint, MODEL_3D, run_data())  # trained on background, core, shell
    root = rename_in_dataset_json(write_decathlon(tmp_path / "Swapped", cases=4),
                                  classes=("background", "shell", "core"))
    cfg = compose_config([f"data.root={root}", f"runs=[{run}]", "tta=false", "op=python", "device=cpu"],
                         output_dir=tmp_path / "decided", name="postprocess")
    refused = f"classes ['background', 'shell', 'core'] in {root}/dataset.json but ['background', 'core', 'shell'] in "
    with pytest.raises(ConfigError, match=re.escape(f"{refused}{checkpoint}")):
        postprocess_command(cfg)
    assert not (run / FILE).exists()


def test_postprocess_leaves_out_a_run_that_trained_on_its_validation_cases(tmp_path):
    # data.fold=all validates on its training cases: rules chosen on them would be chosen in-sample
    root = write_decathlon(tmp_path / "Task", cases=4)
    fold, every_case = tmp_path / "fold0", tmp_path / "all"
    for run, data in ((fold, run_data()), (every_case, {**run_data(), "fold": "all"})):
        write_checkpoint(run / "checkpoints" / "final.ckpt", MODEL_3D, data)
    record = postprocess_command(compose_config([f"data.root={root}", f"runs=[{every_case},{fold}]", "tta=false",
                                                 "op=python", "device=cpu"], output_dir=tmp_path / "decided",
                                                name="postprocess"))
    assert record["decided_on"]["runs"] == [str(fold.resolve())] and record["decided_on"]["cases"] == 2
    assert record["decided_on"]["left_out"] == {
        str(every_case.resolve()): "it trained on 4 of its 4 validation case(s) (data.fold=all)"}
    assert (fold / FILE).is_file() and not (every_case / FILE).exists()
