"""scripts/ablation_report.py on placement, recipe and loss sweeps: a variant with a planted per-case
improvement in Dice, HD95 (lower) or NSD is called better, a copy of the baseline is called not
different, the table carries each variant's cost and each metric's direction, and a recipe sweep is
compared within each budget, a loss sweep within each placement and, in its layer view, the
placements within each loss. The sweep folders are written as Hydra and training write them."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from helpers.sweeps import CLASSES, METRIC_KEYS, csv_rows, run_report, write_hydra, write_run


def planted(rng, cases):
    """Baseline scores of some cases, a copy, and "edge": Dice +0.03, HD95 -1 mm, NSD +0.04 per case (with noise)."""
    base = {"Dice": {c: float(rng.uniform(0.6, 0.9)) for c in cases},
            "HD95": {c: float(rng.uniform(3.0, 9.0)) for c in cases},
            "NSD": {c: float(rng.uniform(0.5, 0.8)) for c in cases}}
    shift = {"Dice": 0.03, "HD95": -1.0, "NSD": 0.04}
    edge = {metric: {c: v + shift[metric] + float(rng.normal(0, abs(shift[metric]) / 6)) for c, v in values.items()}
            for metric, values in base.items()}
    return base, edge


def test_a_planted_improvement_is_better_and_a_copy_is_not_different(tmp_path):
    rng = np.random.default_rng(0)
    index = 0
    for fold in range(2):
        cases = [f"case_{fold}_{i}" for i in range(10)]
        for seed in range(3):
            base, edge = planted(rng, cases)
            for variant, scores in {"none": base, "copy": base, "edge": edge}.items():
                write_run(tmp_path / str(index), {"variant": variant}, {"seed": seed, "data": {"fold": fold}}, scores,
                          parameters=1000 + (variant != "none"))
                index += 1
    ran = run_report(tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    rows = csv_rows(tmp_path)
    assert {variant for _, _, variant in rows} == {"copy", "edge"}
    for metric, direction in (("Dice", 1), ("HD95", -1), ("NSD", 1)):
        edge, copy = rows["", metric, "edge"], rows["", metric, "copy"]
        assert edge["n_cases"] == "20" and edge["verdict"] == "better", (metric, edge)
        assert direction * float(edge["ci_low" if direction > 0 else "ci_high"]) > 0  # the interval excludes 0
        assert copy["verdict"].startswith("no difference found"), (metric, copy)
        assert edge["higher_is_better"] == str(direction > 0)
    assert float(rows["", "Dice", "edge"]["mean_difference"]) == pytest.approx(0.03, abs=0.005)
    assert float(rows["", "HD95", "edge"]["mean_difference"]) == pytest.approx(-1.0, abs=0.1)
    assert float(rows["", "Dice", "edge"]["parameters"]) == 1001.0
    assert "| edge | 20 | 1001 |" in ran.stdout and (tmp_path / "ablation.png").is_file()
    assert "### HD95 (mm), lower is better: a negative Δ is an improvement" in ran.stdout
    assert "### Dice, higher is better" in ran.stdout


def test_a_planted_hd95_worsening_is_worse(tmp_path):
    rng = np.random.default_rng(1)
    cases = [f"case_{i}" for i in range(12)]
    for seed in range(2):
        base, edge = planted(rng, cases)
        blurred = {"HD95": {c: v + 2.0 + float(rng.normal(0, 0.3)) for c, v in base["HD95"].items()}}
        for variant, scores in {"none": {"HD95": base["HD95"]}, "blurred": blurred}.items():
            write_run(tmp_path / f"{variant}{seed}", {"variant": variant}, {"seed": seed, "data": {"fold": 0}}, scores)
    assert run_report(tmp_path).returncode == 0
    row = csv_rows(tmp_path)["", "HD95", "blurred"]
    assert row["verdict"] == "worse" and float(row["ci_low"]) > 0


def thin_core(scores: dict[str, dict[str, float]]) -> dict[str, dict]:
    """A run's topology metrics as training records them with data.topology_classes=[core]: shell,
    not a thin class, has NaN placeholders."""
    return {METRIC_KEYS[metric]: {c: {"core": v, "shell": math.nan} for c, v in per_case.items()}
            for metric, per_case in scores.items()}


def test_topology_metrics_are_compared_by_their_direction(tmp_path):
    """A variant that breaks fewer structures (Betti-0 error down by one per case) is better, as is
    one with a higher clDice; a run without topology scores has no such table. The NaN placeholders
    of the class outside topology_classes are no scores: not a Betti error, not a perfect clDice."""
    rng = np.random.default_rng(4)
    cases = [f"case_{i}" for i in range(8)]
    for seed in range(2):
        errors = {c: float(rng.integers(2, 6)) for c in cases}
        cl = {c: float(rng.uniform(0.5, 0.8)) for c in cases}
        config = {"seed": seed, "data": {"fold": 0, "topology_classes": ["core"]}}
        write_run(tmp_path / f"none{seed}", {"variant": "none"}, config, {"Dice": cl},
                  **thin_core({"clDice": cl, "Betti0 error": errors}))
        write_run(tmp_path / f"skips{seed}", {"variant": "skips"}, config, {"Dice": cl},
                  **thin_core({"clDice": {c: v + 0.05 for c, v in cl.items()},
                               "Betti0 error": {c: v - 1 for c, v in errors.items()}}))
    ran = run_report(tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    rows = csv_rows(tmp_path)
    assert rows["", "Betti0 error", "skips"]["verdict"] == "better"
    assert float(rows["", "Betti0 error", "skips"]["mean_difference"]) == pytest.approx(-1.0)
    assert rows["", "clDice", "skips"]["verdict"] == "better"
    assert float(rows["", "clDice", "skips"]["mean_difference"]) == pytest.approx(0.05)
    assert "### Betti0 error, lower is better" in ran.stdout
    assert not any(metric == "Betti1 error" for _, metric, _ in rows)


def test_a_variant_that_predicts_a_structure_where_there_is_none_is_worse(tmp_path):
    """shell is absent from 8 of 12 cases: "none" predicts it nowhere there (NaN), "spill" predicts it
    in all of them (Dice and NSD 0, HD95 the image's diagonal, 100 mm) and is otherwise the same. Read
    as perfect beside that, over two classes, Dice and NSD fall by 0.5 * 8 / 12 and HD95 rises by
    50 * 8 / 12; with NaN left out, the report had found the two no different."""
    rng = np.random.default_rng(6)
    cases = [f"case_{i}" for i in range(12)]
    spilled = {"Dice": 0.0, "HD95": 100.0, "NSD": 0.0}
    for seed in range(2):
        base = {metric: {c: float(rng.uniform(*bounds)) for c in cases}
                for metric, bounds in {"Dice": (0.6, 0.9), "HD95": (3.0, 9.0), "NSD": (0.5, 0.8)}.items()}
        for variant in ("none", "spill"):
            absent = {metric: math.nan if variant == "none" else value for metric, value in spilled.items()}
            per_class = {METRIC_KEYS[metric]: {c: {"core": v, "shell": absent[metric] if i < 8 else v}
                                               for i, (c, v) in enumerate(per_case.items())}
                         for metric, per_case in base.items()}
            write_run(tmp_path / f"{variant}{seed}", {"variant": variant}, {"seed": seed, "data": {"fold": 0}}, {},
                      **per_class)
    ran = run_report(tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    rows = csv_rows(tmp_path)
    for metric, shift in (("Dice", -0.5), ("NSD", -0.5), ("HD95", 50.0)):
        row = rows["", metric, "spill"]
        assert row["verdict"] == "worse" and row["n_cases"] == "12", (metric, row)
        assert float(row["mean_difference"]) == pytest.approx(shift * 8 / 12)
    assert rows["", "HD95", "spill"]["absent_class"] == (
        "a class absent from a case and not predicted scores 0 mm (recorded NaN)")
    assert "Per case: a class absent from a case and not predicted scores 1 (recorded NaN)." in ran.stdout


def test_a_recipe_sweep_is_compared_within_each_budget(tmp_path):
    """Smaller crops help at the short budget and hurt at the long one; the budgets must not be pooled
    (pooled, the two would cancel out) and recipe=plan is the baseline of each."""
    rng = np.random.default_rng(2)
    cases = [f"case_{i}" for i in range(15)]
    index = 0
    for budget, effect in (("short", 0.04), ("long", -0.04)):
        for seed in range(3):
            base = {c: float(rng.uniform(0.5, 0.8)) for c in cases}
            recipes = {"plan": base, "no_affine": base,
                       "small_patch": {c: v + effect + float(rng.normal(0, 0.005)) for c, v in base.items()}}
            for recipe, dice in recipes.items():
                write_run(tmp_path / str(index), {"recipe": recipe, "budget": budget, "variant": None},
                          {"seed": seed, "data": {"fold": 0}}, {"Dice": dice})
                index += 1
    ran = run_report(tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    rows = csv_rows(tmp_path)
    assert rows["budget=short", "Dice", "small_patch"]["verdict"] == "better"
    assert rows["budget=long", "Dice", "small_patch"]["verdict"] == "worse"
    assert rows["budget=long", "Dice", "no_affine"]["verdict"].startswith("no difference found")
    assert {variant for _, _, variant in rows} == {"small_patch", "no_affine"}  # plan is the baseline
    assert "### budget=short: Dice, higher is better" in ran.stdout and "recipe ablation" in ran.stdout


def test_a_failed_run_is_named_and_fails_the_report(tmp_path):
    for index, variant in enumerate(["none", "edge"]):
        write_run(tmp_path / str(index), {"variant": variant}, {"seed": 0, "data": {"fold": 0}},
                  {"Dice": {"a": 0.5, "b": 0.6, "c": 0.7}})
    write_hydra(tmp_path / "2", {"variant": "edge"}, {"seed": 1, "data": {"fold": 0}})  # died before metrics.json
    ran = run_report(tmp_path)
    assert ran.returncode == 1
    assert "- FLAG: run 2 (edge): no metrics.json" in ran.stdout


def test_postprocessing_on_is_paired_with_off_on_the_baselines_predictions(tmp_path):
    """recipe=plan's runs carry each case's Dice after each postprocessing rule: the foreground's
    largest component planted to help every case, each class's to cost every case. Each rule becomes
    a variant paired with plan's own predictions, on Dice alone; other recipes' rules are not read."""
    rng = np.random.default_rng(5)
    cases = [f"case_{i}" for i in range(10)]
    for seed in range(2):
        base = {c: float(rng.uniform(0.5, 0.8)) for c in cases}
        rules = {rule: {c: {name: v + shift + 0.001 * i for name in CLASSES} for i, (c, v) in enumerate(base.items())}
                 for rule, shift in (("foreground", 0.03), ("classes", -0.02))}
        for recipe in ("plan", "no_affine"):
            write_run(tmp_path / f"{recipe}{seed}", {"recipe": recipe, "budget": "short", "variant": None},
                      {"seed": seed, "data": {"fold": 0}}, {"Dice": base, "NSD": base},
                      val_dice_postprocessed_per_case=rules)
    ran = run_report(tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    rows = csv_rows(tmp_path)
    assert rows["budget=short", "Dice", "postprocessing: foreground"]["verdict"] == "better"
    assert float(rows["budget=short", "Dice", "postprocessing: foreground"]["mean_difference"]) == pytest.approx(
        0.03 + 0.0045)
    assert rows["budget=short", "Dice", "postprocessing: classes"]["verdict"] == "worse"
    assert {variant for _, metric, variant in rows if metric == "NSD"} == {"no_affine"}
    assert {variant for _, _, variant in rows} == {"no_affine", "postprocessing: foreground", "postprocessing: classes"}


def test_a_loss_sweep_pairs_losses_within_placements_and_placements_within_losses(tmp_path):
    """The edge loss lowers HD95 by 1 mm on the plain U-Net and by 2 mm with the edge layer, which
    alone changes nothing: by loss, edge is better within both placements; in the layer view the
    layer is better only once the loss is edge's."""
    rng = np.random.default_rng(5)
    cases = [f"case_{i}" for i in range(10)]
    effect = {("dice_ce", "none"): 0.0, ("edge", "none"): -1.0, ("dice_ce", "input_skips"): 0.0,
              ("edge", "input_skips"): -2.0}
    for seed in range(2):
        base = {c: float(rng.uniform(3.0, 9.0)) for c in cases}
        for index, ((loss, placement), shift) in enumerate(effect.items()):
            hd95 = {c: v + shift + float(rng.normal(0, 0.05)) * (shift != 0) for c, v in base.items()}
            write_run(tmp_path / f"{seed}_{index}", {"experiment": "ablation_loss", "loss": loss, "variant": placement},
                      {"seed": seed, "data": {"fold": 0}}, {"HD95": hd95})
    ran = run_report(tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    rows = csv_rows(tmp_path)
    assert {variant for _, _, variant in rows} == {"edge"}  # dice_ce is the baseline
    assert float(rows["variant=none", "HD95", "edge"]["mean_difference"]) == pytest.approx(-1.0, abs=0.05)
    assert float(rows["variant=input_skips", "HD95", "edge"]["mean_difference"]) == pytest.approx(-2.0, abs=0.05)
    assert "loss ablation" in ran.stdout
    layer = run_report(tmp_path, "--kind", "layer")
    assert layer.returncode == 0, layer.stdout + layer.stderr[-3000:]
    rows = csv_rows(tmp_path, "ablation-layer.csv")
    assert rows["loss=edge", "HD95", "input_skips"]["verdict"] == "better"
    assert float(rows["loss=dice_ce", "HD95", "input_skips"]["mean_difference"]) == 0.0
    assert (tmp_path / "ablation-layer.md").is_file() and (tmp_path / "ablation.md").is_file()


def test_the_report_reads_its_tables_without_torch_or_monai():
    # scripts/ablation_report.py pairs numbers from CSVs; importing torch would add seconds to every report
    code = ("import sys, segnet.evaluation.ablation, segnet.evaluation.statistics; "
            "print(sorted(m for m in ('torch', 'monai', 'lightning') if m in sys.modules))")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip() == "[]"
