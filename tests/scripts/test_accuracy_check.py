"""scripts/accuracy_check.py: a run compared with the record per case, "worse" where the record was
planted better, "no difference" where retraining alone could move the mean as much, and no
comparison at all when the record scored other data or other checks."""

from __future__ import annotations

import json

import pytest

from scripts import accuracy_check

CASES = [f"case_{i}" for i in range(8)]


def rows(dice_by_seed: dict[int, float], nsd: float = 0.8, shift=lambda case: 0.0) -> list[dict]:
    """Scores of the 'hard' dataset, fold 0: two classes per case, Dice per seed plus a per-case shift."""
    return [{"dataset": "hard", "fold": 0, "seed": seed, "case": case, "class": c, "metric": metric,
             "value": (dice + shift(case) + 0.01 * i if metric == "Dice" else nsd)}
            for seed, dice in dice_by_seed.items() for i, case in enumerate(CASES) for c in ("1", "2")
            for metric in ("Dice", "NSD")]


def test_a_run_worse_on_every_case_is_worse_and_an_unchanged_metric_is_no_difference():
    record = rows({0: 0.80, 1: 0.81})
    now = rows({0: 0.80, 1: 0.81}, shift=lambda case: -0.05 - 0.002 * CASES.index(case))
    dice, nsd = accuracy_check.compare_with_record(now, record, "hard")
    assert dice["verdict"] == "worse" and dice["n_cases"] == 8
    assert dice["mean_difference"] == pytest.approx(-0.05 - 0.002 * 3.5)
    assert dice["seed_spread"] == pytest.approx(0.01 / 2 ** 0.5)  # std of the two seeds' means, ddof 1
    assert nsd["verdict"].startswith("no difference found") and nsd["mean_difference"] == 0


def test_a_difference_within_the_records_seed_spread_is_no_difference():
    """The seeds of the record differ by 0.2 in mean Dice: a uniform -0.05 is what retraining moves."""
    record = rows({0: 0.60, 1: 0.80})
    now = rows({0: 0.60, 1: 0.80}, shift=lambda case: -0.05 - 0.001 * CASES.index(case))
    dice, _ = accuracy_check.compare_with_record(now, record, "hard")
    assert dice["ci_high"] < 0  # the interval alone would call it worse
    assert dice["verdict"].startswith("no difference (within the record's seed spread")


def test_a_run_that_predicts_a_class_in_cases_without_it_is_worse():
    """Class 2 is absent from half the cases: the record predicted it nowhere there (NaN), this run
    predicts it in all of them (0). Read as 1 beside 0 that is -0.5 per such case, -0.25 on average,
    and the means say the same; leaving NaN out had found no difference at all."""
    def scores(wrong: float) -> list[dict]:
        return [{**r, "value": wrong} if r["class"] == "2" and CASES.index(r["case"]) % 2 else r
                for r in rows({0: 0.80, 1: 0.81})]

    dice, nsd = accuracy_check.compare_with_record(scores(0.0), scores(float("nan")), "hard")
    for row in (dice, nsd):
        assert row["verdict"] == "worse" and row["mean_difference"] == pytest.approx(-0.25)
        assert row["now"] - row["record"] == pytest.approx(row["mean_difference"])
    # per case: class 1 the seeds' mean 0.805 + 0.01 i, class 2 the same or, absent, 1
    assert dice["record"] == pytest.approx(sum((0.805 + 0.01 * i + (1.0 if i % 2 else 0.805 + 0.01 * i)) / 2
                                               for i in range(8)) / 8)
    text = accuracy_check.markdown([dice, nsd], {"date": "today", "commit": "0" * 10}, {"hard": 1.0})
    assert "Per case, Dice: a class absent from a case and not predicted scores 1 (recorded NaN); NSD: " in text


@pytest.mark.slow
def test_a_rerun_reproduces_the_record_and_a_planted_better_record_makes_it_worse(tmp_path, monkeypatch):
    monkeypatch.setenv("SEGNET_PREPROCESSED", str(tmp_path / "cache"))
    monkeypatch.setattr(accuracy_check, "CHECKS", (accuracy_check.Check("hard", 25, 2, 2, (1,), (0,)),))
    record, out = tmp_path / "record.json", tmp_path / "out"
    assert accuracy_check.main(["--out", str(out), "--record", str(record), "--update"]) == 0
    written = json.loads(record.read_text())
    assert {row["case"] for row in written["scores"]} == {f"hard_{i:03d}" for i in range(25)} - set(
        json.loads((out / "runs" / "hard_fold1_seed0" / "splits.json").read_text())["train"])
    assert len(written["scores"]) == 5 * 2 * 2  # cases x classes x (Dice, NSD)

    planted = {**written, "scores": [{**r, "value": r["value"] + (0.2 if r["metric"] == "Dice" else 0.0)}
                                     for r in written["scores"]]}
    record.write_text(json.dumps(planted))
    assert accuracy_check.main(["--out", str(out), "--record", str(record)]) == 1
    dice, nsd = json.loads((out / "accuracy.json").read_text())["comparison"]
    assert dice["verdict"] == "worse" and dice["mean_difference"] == pytest.approx(-0.2, abs=1e-9)
    assert nsd["mean_difference"] == 0  # the same tree retrained the same model
    assert "| hard | Dice | 5 |" in (out / "accuracy.md").read_text()

    record.write_text(json.dumps({**written, "datasets": {"hard": "another generator"}}))
    assert accuracy_check.main(["--out", str(out), "--record", str(record)]) == 2
    record.write_text(json.dumps({**written, "checks": []}))
    assert accuracy_check.main(["--out", str(out), "--record", str(record)]) == 2
    record.write_text(json.dumps({**written, "checks": [], "scores": []}))  # a record before a check was added
    assert accuracy_check.main(["--out", str(out), "--record", str(record), "--update"]) == 0
    assert json.loads(record.read_text())["checks"] == written["checks"]


def test_a_record_made_elsewhere_is_named_under_the_table():
    here = accuracy_check.environment()
    assert {"python", "torch", "numpy", "cpu", "cores"} <= set(here)
    assert accuracy_check.environment_note({"environment": dict(here)}, here) == ""  # the same place: nothing to say
    note = accuracy_check.environment_note({"environment": {**here, "torch": "2.0.0", "cpu": "elsewhere"}}, here)
    assert f"torch 2.0.0 there, {here['torch']} here" in note and "cpu elsewhere there" in note
    assert "does not say where it was made" in accuracy_check.environment_note({}, here)
