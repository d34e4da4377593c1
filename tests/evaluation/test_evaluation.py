"""Evaluation: metrics against hand-computed values, geometry of predictions, splits, layouts."""

from __future__ import annotations

import csv
import json
import math
import warnings

import nibabel as nib
import numpy as np
import pytest
import torch

from helpers.commands import run_command
from helpers.data import OBLIQUE_AFFINE, other_scanner, write_decathlon, write_nnunet
from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.data.transforms import eval_transforms
from segnet.errors import ConfigError
from segnet.evaluation.evaluator import (
    METRICS,
    CaseResult,
    Evaluator,
    score_case,
    select_cases,
    summarize,
    write_reports,
)
from segnet.inference.loading import load_checkpoint
from segnet.metrics import dice_per_class, hd95_per_class, mean_per_class, nsd_per_class
from segnet.topology_metrics import topology_classes
from segnet.training.train import train


def test_dice_follows_nnunet_for_overlap_absent_and_one_sided_classes():
    reference = torch.zeros(10, dtype=torch.long)
    prediction = torch.zeros(10, dtype=torch.long)
    reference[0:6] = 1  # 6 voxels
    prediction[3:7] = 1  # 4 voxels, 3 overlapping
    prediction[9] = 3  # class 3 only predicted
    dice = dice_per_class(prediction, reference, [(1,), (2,), (3,)])
    assert dice[0] == pytest.approx(2 * 3 / (4 + 6))
    assert math.isnan(dice[1])  # class 2: in neither
    assert dice[2] == 0.0  # class 3: only in the prediction


def test_hd95_is_in_millimetres_from_the_spacing():
    reference = torch.zeros(1, 1, 8, dtype=torch.long)
    prediction = torch.zeros(1, 1, 8, dtype=torch.long)
    reference[0, 0, 1] = 1
    prediction[0, 0, 4] = 1
    assert hd95_per_class(prediction, reference, [(1,)], spacing=(1.0, 1.0, 2.0)) == [pytest.approx(6.0)]
    assert math.isnan(hd95_per_class(prediction, torch.zeros_like(reference), [(1,)])[0])


def as_probabilities(label_map: torch.Tensor, classes: int = 3) -> torch.Tensor:
    """A label map as certain class probabilities (classes, *spatial), what a predictor returns."""
    return torch.nn.functional.one_hot(label_map.long(), classes).movedim(-1, 0).float()


def scored(prediction: np.ndarray, reference: np.ndarray, tmp_path, spacing=(1.0, 2.0, 3.0), tolerance=1.0,
           topology=()):
    path = tmp_path / "reference.nii.gz"
    nib.save(nib.Nifti1Image(reference.astype(np.uint8), np.diag([*spacing, 1.0])), str(path))
    return score_case(prediction, str(path), ["background", "core", "shell"], nsd_tolerance_mm=tolerance,
                      topology=topology)


def block(shape=(10, 12, 8), corner=(2, 3, 2), size=(4, 4, 3), value=1) -> np.ndarray:
    out = np.zeros(shape, np.int64)
    out[tuple(slice(c, c + n) for c, n in zip(corner, size, strict=True))] = value
    return out


def test_surface_dice_of_a_class_on_one_side_is_zero_in_neither_nan_and_warns_of_nothing():
    reference = torch.zeros(8, 8, 8, dtype=torch.long)
    reference[2:6, 2:6, 2:6] = 1
    prediction = reference.clone()
    prediction[1:3, 1:3, 1:3] = 2  # class 2 only in the prediction; class 3 in neither
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # MONAI warns of an empty mask where it is handed one
        scores = nsd_per_class(prediction, reference, [(1,), (2,), (3,)], tolerance_mm=1.0)
    assert scores[0] == pytest.approx(1.0, abs=0.05) and scores[1] == 0.0 and math.isnan(scores[2])


def test_a_structure_missed_or_invented_scores_the_image_diagonal_as_hd95(tmp_path):
    reference = block() + block(corner=(7, 7, 5), size=(2, 2, 2), value=2)
    missed_shell = block()
    metrics = scored(missed_shell, reference, tmp_path)
    diagonal = math.sqrt((9 * 1.0) ** 2 + (11 * 2.0) ** 2 + (7 * 3.0) ** 2)
    assert metrics["2"]["HD95"] == pytest.approx(diagonal) and metrics["2"]["Dice"] == 0.0
    assert metrics["1"]["HD95"] == 0.0
    invented = scored(reference, block(), tmp_path)  # shell predicted where the reference has none
    assert invented["2"]["HD95"] == pytest.approx(diagonal)
    # so missing the structure is never better for mean HD95 than a poor outline of it
    poor = scored(block() + block(corner=(0, 0, 0), size=(2, 2, 2), value=2), reference, tmp_path)
    assert poor["2"]["HD95"] < metrics["2"]["HD95"]


def test_overlap_counts_iou_and_surface_dice(tmp_path):
    reference = block()
    shifted = block(corner=(3, 3, 2))  # one voxel (1 mm) along the first axis
    metrics = scored(shifted, reference, tmp_path)["1"]
    assert (metrics["TP"], metrics["FP"], metrics["FN"]) == (36, 12, 12)
    assert metrics["TP"] + metrics["FP"] + metrics["FN"] + metrics["TN"] == reference.size
    assert (metrics["n_pred"], metrics["n_ref"]) == (48, 48)
    assert metrics["IoU"] == pytest.approx(36 / 60) and metrics["Dice"] == pytest.approx(72 / 96)
    assert metrics["NSD"] == pytest.approx(1.0)  # every boundary voxel within 1 mm of the other
    strict = scored(shifted, reference, tmp_path, tolerance=0.5)["1"]
    assert 0.0 < strict["NSD"] < 1.0
    assert math.isnan(scored(shifted, reference, tmp_path)["2"]["IoU"])  # in neither


def test_the_thin_classes_get_cldice_and_betti_errors_and_the_others_nan(tmp_path):
    reference = block(size=(4, 8, 1)) + block(corner=(7, 2, 5), size=(1, 9, 1), value=2)
    broken = reference.copy()
    broken[7, 6, 5] = 0  # the shell's line in two pieces
    metrics = scored(broken, reference, tmp_path, topology=topology_classes(["shell"], ["background", "core", "shell"]))
    assert metrics["2"]["Betti0 error"] == 1.0 and metrics["2"]["Betti1 error"] == 0.0
    assert metrics["2"]["clDice"] == pytest.approx(2 * (8 / 9) / (1 + 8 / 9))
    assert not {"clDice", "Betti0 error", "Betti1 error"} & set(metrics["1"])  # not a thin class
    assert topology_classes("all", ["background", "core", "shell"]) == [1, 2]
    assert topology_classes("none", ["background", "core", "shell"]) == []
    # the summary and per_case.csv carry them; the mean of a class without them is NaN
    from segnet.data.dataset_json import Case

    result = CaseResult(Case("case_a", ("image.nii.gz",), "label.nii.gz"), tmp_path / "case_a.nii.gz", metrics)
    summary = summarize([result], ["background", "core", "shell"])
    assert summary["mean"]["2"]["Betti0 error"] == 1.0 and math.isnan(summary["mean"]["1"]["clDice"])
    assert summary["foreground_mean"]["Betti0 error"] == 1.0
    write_reports(summary, tmp_path / "eval")
    rows = list(csv.DictReader(open(tmp_path / "eval" / "per_case.csv")))
    assert rows[1]["Betti0 error"] == "1.0" and rows[0]["clDice"] == "nan"
    with pytest.raises(ConfigError, match="topology_classes names \\['vessel'\\]"):
        topology_classes(["vessel"], ["background", "core", "shell"])


def test_means_leave_nan_cases_out():
    assert mean_per_class([[1.0, math.nan], [0.5, 0.2]]) == [0.75, pytest.approx(0.2)]


def load_as_trained(evaluator: Evaluator, image: str, label: str) -> torch.Tensor:
    """The label as the model's loader presents it next to its image (the plan's orientation and
    spacing): an oracle prediction."""
    load = eval_transforms(with_label=True, **evaluator.predictor.configurations[0].geometry)
    return load({"image": image, "label": label})["label"][0]


@pytest.fixture
def oracle_evaluator(trained_3d, tmp_path, monkeypatch):
    """An evaluator whose 'model' answers with the reference label (loaded and reoriented like an
    image), so predictions written back must reproduce the label files voxel for voxel. The shared
    3D model (its task on an oblique grid, with a test image) gives the plan and the network."""
    evaluator = Evaluator(load_checkpoint(trained_3d.checkpoint, backend="cpp"), tmp_path / "eval")
    return evaluator, describe_dataset(str(trained_3d.root)), monkeypatch


def test_predictions_come_back_in_the_image_geometry(oracle_evaluator):
    evaluator, description, monkeypatch = oracle_evaluator
    labels = {case.images[0]: case.label for case in description.training}
    current = {}
    monkeypatch.setattr(
        evaluator, "predict",
        lambda image, _: as_probabilities(load_as_trained(evaluator, current["image"], labels[current["image"]])),
    )
    results = []
    for case in description.training:
        current["image"] = case.images[0]
        results.append(evaluator.run_case(case))
    for result in results:
        written = nib.load(result.prediction_file)
        label = nib.load(result.case.label)
        image = nib.load(result.case.images[0])
        assert written.shape == image.shape
        assert written.get_data_dtype() == np.uint8
        assert np.allclose(written.affine, image.affine)
        assert np.array_equal(np.asarray(written.dataobj), np.asarray(label.dataobj))
        assert all(m["Dice"] == 1.0 and m["HD95"] == 0.0 for m in result.metrics.values())
        voxel = 2.5 * 0.8 * 1.2
        core = result.metrics["1"]
        assert core["volume_ref_mm3"] == pytest.approx(core["n_ref"] * voxel)


def test_the_model_is_shown_the_plans_grid_and_answered_on_it(oracle_evaluator):
    """The oracle above is the label loaded by the chain that Invertd undoes, so it would agree
    with itself with Orientationd dropped or its axes in the wrong order. Here the answer is the
    stored label put in the plan's axis order by nibabel alone (no resampling: the plan's spacing
    is these cases' own), and the image the model is handed must be on that same grid."""
    from nibabel.orientations import apply_orientation, axcodes2ornt, io_orientation, ornt_transform

    evaluator, description, monkeypatch = oracle_evaluator
    geometry = evaluator.predictor.configurations[0].geometry
    orientation, spacing = geometry["orientation"], geometry["spacing"]
    # OBLIQUE_AFFINE: 0.8 mm along P, 1.2 along S, 2.5 along L; R, the coarsest, is the slicing axis
    assert orientation == "ASR" and spacing == pytest.approx([0.8, 1.2, 2.5])

    def on_plan_axes(path: str) -> np.ndarray:
        stored = nib.load(path)
        to_plan = ornt_transform(io_orientation(stored.affine), axcodes2ornt(orientation))
        return apply_orientation(np.asarray(stored.dataobj), to_plan)

    shown = {}

    def predict(image, configuration):
        shown["image"] = image
        return as_probabilities(torch.from_numpy(on_plan_axes(shown["case"].label).astype(np.int64)))

    monkeypatch.setattr(evaluator, "predict", predict)
    for case in description.training:
        shown["case"] = case
        result = evaluator.run_case(case)
        image = shown["image"]
        affine = np.asarray(image.affine, np.float64)
        assert "".join(nib.aff2axcodes(affine)) == orientation
        assert np.linalg.norm(affine[:3, :3], axis=0) == pytest.approx(spacing, abs=1e-5)
        expected = on_plan_axes(case.images[0])
        assert tuple(image.shape[1:]) == expected.shape
        # the same voxels in the same places: z-scored per volume, so equal up to gain and offset
        assert np.corrcoef(image[0].numpy().ravel(), expected.ravel())[0, 1] > 0.9999
        written = np.asarray(nib.load(result.prediction_file).dataobj)
        assert np.array_equal(written, np.asarray(nib.load(case.label).dataobj))
        assert all(m["Dice"] == 1.0 for m in result.metrics.values())


def test_absent_class_is_nan_and_left_out_of_the_mean(oracle_evaluator, tmp_path):
    evaluator, description, monkeypatch = oracle_evaluator
    case = description.training[0]
    label = nib.load(case.label)
    without_shell = np.asarray(label.dataobj).copy()
    without_shell[without_shell == 2] = 0
    edited = tmp_path / "no_shell.nii.gz"
    nib.save(nib.Nifti1Image(without_shell, label.affine, label.header), str(edited))
    from segnet.data.dataset_json import Case

    monkeypatch.setattr(evaluator, "predict",
                        lambda image, _: as_probabilities(load_as_trained(evaluator, case.images[0], str(edited))))
    result = evaluator.run_case(Case(case.name, case.images, str(edited)))
    assert result.metrics["1"]["Dice"] == 1.0
    assert math.isnan(result.metrics["2"]["Dice"]) and math.isnan(result.metrics["2"]["HD95"])
    summary = summarize([result], ["background", "core", "shell"])
    assert summary["foreground_mean"]["Dice"] == 1.0  # the NaN class is left out
    write_reports(summary, tmp_path / "eval")
    rows = list(csv.DictReader(open(tmp_path / "eval" / "per_case.csv")))
    assert [(r["class"], r["name"]) for r in rows] == [("1", "core"), ("2", "shell")]


def test_image_without_label_gets_a_prediction_and_no_metrics(oracle_evaluator):
    evaluator, description, _ = oracle_evaluator
    (case,) = description.test
    result = evaluator.run_case(case)
    assert result.metrics is None
    assert nib.load(result.prediction_file).shape == nib.load(case.images[0]).shape


def test_scanner_scale_and_offset_do_not_change_predictions(oracle_evaluator, tmp_path):
    """Per-volume normalization: the same anatomy scanned with another gain and offset."""
    evaluator, description, _ = oracle_evaluator
    case = description.training[0]
    original = nib.load(case.images[0])
    rescaled = tmp_path / "rescaled.nii.gz"
    nib.save(nib.Nifti1Image(np.asarray(original.dataobj) * 3.0 + 500.0, original.affine), str(rescaled))
    load = eval_transforms(with_label=False)
    configuration = evaluator.predictor.configurations[0]
    first = evaluator.predict(load({"image": case.images[0]})["image"], configuration).argmax(0)
    second = evaluator.predict(load({"image": str(rescaled)})["image"], configuration).argmax(0)
    assert torch.equal(first, second)


@pytest.mark.slow
def test_model_generalizes_to_a_scanner_it_was_not_trained_on(tmp_path):
    """Train on one 'scanner', evaluate on volumes from another (gain, offset, bias field, noise)."""
    seen = write_decathlon(tmp_path / "SeenScanner", cases=6)
    unseen = write_decathlon(tmp_path / "UnseenScanner", cases=3, first_seed=50, scanner=other_scanner)
    run = tmp_path / "train"
    train(compose_config(["data=folder", "data.steps_per_epoch=null", f"data.root={seen}",
                          "data.patch_size=[16,16,16]", "data.num_workers=0",
                          "data.batch_size=2", "data.samples_per_volume=4", "data.num_folds=3",
                          "model.channels=[8,16,32]",
                          "model.strides=[2,2]", *TINY_TRAINER[:1], "trainer.max_epochs=25",
                          "trainer.check_val_every_n_epoch=25", "trainer.enable_model_summary=false",
                          "callbacks.progress_bar.refresh_rate=0"], output_dir=run))
    model = load_checkpoint(run / "checkpoints" / "last.ckpt", backend="cpp")
    scores = {}
    for name, root in (("seen", seen), ("unseen", unseen)):
        description = describe_dataset(str(root))
        split = "validation" if name == "seen" else "all"  # seen: its held-out cases only
        cases = select_cases(description, split, model.data)
        results = Evaluator(model, tmp_path / f"eval_{name}").run(cases)
        scores[name] = summarize(results, ["background", "core", "shell"])["foreground_mean"]["Dice"]
    assert scores["seen"] >= 0.7, scores
    assert scores["unseen"] >= scores["seen"] - 0.1, scores


def test_nnunet_layout_is_read(tmp_path):
    description = describe_dataset(str(write_nnunet(tmp_path / "Dataset001_Tiny")))
    assert description.layout == "nnunet"
    assert description.class_names == ("background", "core", "shell")
    assert [c.name for c in description.training] == ["tiny_000", "tiny_001", "tiny_002"]
    assert description.training[0].images[0].endswith("tiny_000_0000.nii.gz")
    assert description.training[0].label.endswith("labelsTr/tiny_000.nii.gz")


@pytest.mark.slow
@pytest.mark.parametrize("layout,spatial_dims", [("decathlon", 3), ("nnunet", 2)])
def test_evaluate_script_end_to_end(tmp_path, layout, spatial_dims):
    root = (write_decathlon(tmp_path / "Task", cases=4, affine=OBLIQUE_AFFINE) if layout == "decathlon"
            else write_nnunet(tmp_path / "Dataset001_Tiny", cases=4))
    patch = "[16,16,16]" if spatial_dims == 3 else "[16,16]"
    train(compose_config(["data=folder", "data.steps_per_epoch=null", f"data.root={root}",
                          f"data.spatial_dims={spatial_dims}",
                          f"data.patch_size={patch}", "data.num_workers=0", "data.batch_size=1", "data.num_folds=4",
                          *TINY_MODEL, *TINY_TRAINER], output_dir=tmp_path / "train"))
    out = tmp_path / "eval"
    result = run_command("segnet-evaluate", f"ckpt_path={tmp_path / 'train/checkpoints/best.ckpt'}",
                         f"data.root={root}", "data.split=all", "tta=true", f"hydra.run.dir={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert {"metric_per_case", "mean", "foreground_mean"} <= set(summary)
    assert summary["num_cases"] == 4
    # data.split=all scores the 3 cases fold 0 of 4 trained on too: said, and listed
    trained = json.loads((tmp_path / "train" / "splits.json").read_text())["train"]
    assert summary["evaluated"]["trained_on"] == sorted(trained) and len(trained) == 3
    assert "3 of the 4 case(s) scored (data.split=all) are cases" in result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert "with test-time mirroring (tta=true; training's validation Dice is without it" in said
    assert set(summary["mean"]) == {"1", "2"} and set(summary["foreground_mean"]) == set(METRICS)
    for case in summary["metric_per_case"]:
        assert case["reference_file"].endswith(".nii.gz") and case["prediction_file"].endswith(".nii.gz")
        written, image = nib.load(case["prediction_file"]), nib.load(case["image"])
        assert written.shape == image.shape and np.allclose(written.affine, image.affine)
        assert 0.0 <= case["metrics"]["1"]["Dice"] <= 1.0
    assert len(list(csv.DictReader(open(out / "per_case.csv")))) == 8
    assert sorted(p.name for p in out.glob("cases_*.png")) == ["cases_core.png", "cases_shell.png"]
