"""segnet-find-best-configuration's choice (segnet.evaluation.candidates) on constructed
cross-validations whose answer is known, and the runs it refuses to compare. End to end, with two
trained configurations: tests/inference/test_prediction.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

from helpers.checkpoints import MODEL_3D, run_data, write_checkpoint
from helpers.data import write_decathlon
from segnet.data.dataset_json import describe_dataset
from segnet.errors import ConfigError
from segnet.evaluation.candidates import Candidate, candidates, choose, ensemble_probabilities
from segnet.postprocessing.find_best import read_runs

CASES = [f"case_{i}" for i in range(8)]


def rows(variant: str, dice: list[float], fold: str = "0") -> list[dict]:
    """Tidy scores of one candidate: one class, Dice per case, HD95 and NSD to match."""
    return [{"variant": variant, "fold": fold, "seed": 0, "case": case, "class": "1", "metric": metric, "value": value}
            for case, d in zip(CASES, dice, strict=True)
            for metric, value in (("Dice", d), ("HD95", 10 * (1 - d)), ("NSD", d))]


def test_the_candidates_are_each_configuration_then_each_pair():
    assert [c.name for c in candidates(["2d", "3d", "3d_lowres"])] == [
        "2d", "3d", "3d_lowres", "2d + 3d", "2d + 3d_lowres", "3d + 3d_lowres"]
    two, three = np.full((2, 4), 0.2), np.full((2, 4), 0.6)
    assert np.allclose(ensemble_probabilities(Candidate(("2d", "3d")), {"2d": two, "3d": three}), 0.4)
    assert np.allclose(ensemble_probabilities(Candidate(("3d",)), {"2d": two, "3d": three}), 0.6)


def test_the_better_configuration_is_chosen_by_its_known_margin():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.6, 0.8, len(CASES))
    options = candidates(["2d", "3d"])
    scores = rows("2d", list(base + 0.1)) + rows("3d", list(base)) + rows("2d + 3d", list(base + 0.05))
    choice = choose(scores, options)
    assert choice["best"] == "2d" and choice["configurations"] == ["2d"]
    assert choice["means"]["2d"]["Dice"] == pytest.approx(np.mean(base) + 0.1)
    dice = {row["variant"]: row for row in choice["compared_with_best"]["Dice"]}
    assert set(dice) == {"3d", "2d + 3d"}
    assert dice["3d"]["mean_difference"] == pytest.approx(-0.1) and dice["3d"]["verdict"].startswith("worse")
    assert dice["2d + 3d"]["mean_difference"] == pytest.approx(-0.05)
    hd95 = {row["variant"]: row for row in choice["compared_with_best"]["HD95"]}
    assert hd95["3d"]["mean_difference"] == pytest.approx(1.0)  # a distance: worse as it grows


def test_a_tie_goes_to_the_single_configuration_then_to_the_order_given():
    same = [0.7] * len(CASES)
    options = candidates(["3d", "2d"])
    assert choose(rows("3d", same) + rows("2d", same) + rows("3d + 2d", same), options)["best"] == "3d"
    better_pair = rows("3d", same) + rows("2d", same) + rows("3d + 2d", [0.71] * len(CASES))
    assert choose(better_pair, options)["best"] == "3d + 2d"


def checkpoint_of(folder, spatial_dims: int, fold: int | str):
    model = {**MODEL_3D, "spatial_dims": spatial_dims}
    write_checkpoint(folder / "checkpoints" / "final.ckpt", model, {**run_data(), "spatial_dims": spatial_dims,
                                                                    "fold": fold})
    return folder


@pytest.fixture
def dataset(tmp_path):
    """The dataset of the runs checkpoint_of writes: 4 cases, 2 folds of 2 validation cases."""
    return describe_dataset(str(write_decathlon(tmp_path / "Task", cases=4)))


def test_runs_are_grouped_by_configuration_and_fold_and_must_cover_the_same_folds(tmp_path, dataset):
    runs = [checkpoint_of(tmp_path / f"{dims}d_{fold}", dims, fold) for dims in (3, 2) for fold in (0, 1)]
    grouped, left_out = read_runs(runs, "final.ckpt", dataset)
    assert {name: sorted(by_fold) for name, by_fold in grouped.items()} == {"3d": ["0", "1"], "2d": ["0", "1"]}
    assert list(grouped) == ["3d", "2d"] and left_out == {}
    with pytest.raises(ConfigError, match=r"cover different folds \(3d: fold\(s\) 0, 1; 2d: fold\(s\) 0\)"):
        read_runs(runs[:3], "final.ckpt", dataset)
    with pytest.raises(ConfigError, match=r"both fold 0 of 3d: give one run per configuration and fold"):
        read_runs([runs[0], checkpoint_of(tmp_path / "again", 3, 0)], "final.ckpt", dataset)


def test_a_run_that_trained_on_its_validation_cases_is_left_out_of_the_cross_validation(tmp_path, dataset, caplog):
    # data.fold=all validates on its training cases: scored with the folds, it would win by overfitting
    folds = [checkpoint_of(tmp_path / f"3d_{fold}", 3, fold) for fold in (0, 1)]
    every_case = checkpoint_of(tmp_path / "3d_all", 3, "all")
    grouped, left_out = read_runs([folds[0], every_case, folds[1]], "final.ckpt", dataset)
    assert {fold: run.folder for fold, run in grouped["3d"].items()} == {"0": folds[0], "1": folds[1]}
    why = "it trained on 4 of its 4 validation case(s) (data.fold=all)"
    assert left_out == {str(every_case.resolve()): why}
    assert f"{every_case} is left out: {why}, so its scores would be in-sample" in caplog.text
    with pytest.raises(ConfigError, match=re.escape(f"every run trained on the cases it validated on "
                                                    f"({every_case.resolve()}: {why}), so none can be scored")):
        read_runs([every_case], "final.ckpt", dataset)
