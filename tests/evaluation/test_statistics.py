"""Paired statistics of an ablation sweep: hand-worked numbers, scipy as the reference, planted effects."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from segnet.evaluation.statistics import (
    agreement,
    bootstrap_ci,
    case_seed_spread,
    compare,
    higher_is_better,
    holm,
    minimum_detectable_difference,
    paired_differences,
    seed_spread,
    wilcoxon_p,
)


def row(variant, fold, seed, case, class_, metric, value):
    return {"variant": variant, "fold": fold, "seed": seed, "case": case, "class": class_, "metric": metric,
            "value": value}


def holm_rejects(p_values, alpha):
    """Holm's procedure as written: reject the smallest p-values in turn while p_(k) <= alpha / (m - k)."""
    rejected = [False] * len(p_values)
    for k, i in enumerate(sorted(range(len(p_values)), key=lambda i: p_values[i])):
        if p_values[i] > alpha / (len(p_values) - k):
            break
        rejected[i] = True
    return rejected


def test_holm_matches_a_hand_worked_example():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # 0.5 * 2 capped at 1, then monotone
    assert holm([0.3, 0.02]) == pytest.approx([0.3, 0.04])
    assert holm([0.02]) == pytest.approx([0.02])
    assert holm([]) == []


def test_holm_adjusted_p_is_the_smallest_alpha_at_which_the_procedure_rejects():
    p_values = np.random.default_rng(3).uniform(0, 0.1, size=8).tolist()
    for i, adjusted in enumerate(holm(p_values)):
        assert holm_rejects(p_values, adjusted * (1 + 1e-9))[i]
        assert not holm_rejects(p_values, adjusted * (1 - 1e-9))[i]


def test_wilcoxon_is_scipys_two_sided_p_and_one_for_identical_runs():
    differences = np.random.default_rng(1).normal(0.01, 0.03, size=25)
    assert wilcoxon_p(differences) == stats.wilcoxon(differences, alternative="two-sided").pvalue
    assert wilcoxon_p([0.0] * 10) == 1.0


def test_bootstrap_interval_of_a_large_normal_sample_is_mean_plus_minus_1_96_standard_errors():
    sample = np.random.default_rng(2).normal(0.3, 1.0, size=400)
    half_width = 1.96 * sample.std(ddof=1) / math.sqrt(sample.size)  # 0.098
    low, high = bootstrap_ci(sample)
    assert low == pytest.approx(sample.mean() - half_width, abs=0.005)
    assert high == pytest.approx(sample.mean() + half_width, abs=0.005)
    assert bootstrap_ci(sample) == (low, high)  # seeded
    assert bootstrap_ci(sample, seed=1) != (low, high)


def test_minimum_detectable_difference_is_the_normal_approximation():
    differences = [0.0, 0.02, 0.04, 0.06]  # sd 0.025820, n 4
    expected = (1.959964 + 0.841621) * 0.0258199 / 2
    assert minimum_detectable_difference(differences) == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="at least 2"):
        minimum_detectable_difference([0.1])


def test_higher_is_better_per_metric():
    assert higher_is_better("Dice") and higher_is_better("NSD")
    assert not higher_is_better("HD95")
    with pytest.raises(ValueError, match="unknown metric 'Volume'"):
        higher_is_better("Volume")


def hand_table():
    """2 seeds x 3 cases x 2 classes, one fold; baseline 0.5 everywhere, variant v 0.5 plus these differences."""
    differences = {  # (seed, case): (class 1, class 2)
        (0, "a"): (0.1, 0.3), (1, "a"): (0.0, 0.2),  # class means 0.2, 0.1 -> case a 0.15
        (0, "b"): (-0.2, 0.0), (1, "b"): (0.1, 0.1),  # -0.1, 0.1 -> 0.0
        (0, "c"): (0.4, 0.4), (1, "c"): (0.2, 0.0),  # 0.4, 0.1 -> 0.25
    }
    rows = []
    for (seed, case), per_class in differences.items():
        for class_, difference in zip((1, 2), per_class, strict=True):
            rows.append(row("base", 0, seed, case, class_, "Dice", 0.5))
            rows.append(row("v", 0, seed, case, class_, "Dice", 0.5 + difference))
    return rows


def test_differences_are_averaged_over_classes_then_seeds_per_case():
    differences = paired_differences(hand_table(), "base", "Dice")
    assert list(differences) == ["v"]
    assert differences["v"] == pytest.approx({"a": 0.15, "b": 0.0, "c": 0.25})


def test_seed_spread_is_the_std_over_seeds_of_the_mean_score():
    # seed 0: case means 0.7, 0.4, 0.9 -> 2/3; seed 1: 0.6, 0.6, 0.6 -> 0.6
    assert seed_spread(hand_table(), "v", "Dice") == pytest.approx(np.std([2 / 3, 0.6], ddof=1))
    assert seed_spread(hand_table(), "base", "Dice") == 0.0
    assert math.isnan(seed_spread([r for r in hand_table() if r["seed"] == 0], "v", "Dice"))


def test_a_class_absent_from_both_runs_is_perfect_in_both():
    """NaN on both sides (absent, and predicted by neither) is 1 beside 1: a difference of 0 in the
    case's class mean, and a 1 in each side's mean."""
    rows = hand_table() + [row("base", 0, 0, "a", 3, "Dice", math.nan), row("v", 0, 0, "a", 3, "Dice", math.nan)]
    # case a: seed 0 (0.1 + 0.3 + 0) / 3, seed 1 (0.0 + 0.2) / 2
    assert paired_differences(rows, "base", "Dice")["v"]["a"] == pytest.approx((0.4 / 3 + 0.1) / 2)
    (v,) = compare(rows, "base", "Dice")
    # baseline case a: seed 0 (0.5 + 0.5 + 1) / 3, seed 1 0.5; cases b and c 0.5
    assert v["baseline_mean"] == pytest.approx(((2 / 3 + 0.5) / 2 + 0.5 + 0.5) / 3)
    assert v["variant_mean"] - v["baseline_mean"] == pytest.approx(v["mean_difference"])


def false_positives(metric="Dice", hit=0.8, wrong=0.0, absent_in=6):
    """10 cases, classes 1 and 2, one fold and seed; class 2 is absent from the first `absent_in` cases:
    the baseline leaves it out there (NaN), "fp" predicts it there (`wrong`); both score `hit` elsewhere,
    with a little per-case spread so that the statistics have something to resample."""
    rows = []
    for case in range(10):
        for class_ in (1, 2):
            value = hit + 0.001 * case
            absent = class_ == 2 and case < absent_in
            rows.append(row("base", 0, 0, f"c{case}", class_, metric, math.nan if absent else value))
            rows.append(row("fp", 0, 0, f"c{case}", class_, metric, wrong if absent else value))
    return rows


def test_a_class_predicted_where_it_is_absent_counts_as_worse():
    """The pair (NaN, 0) is (1, 0): each of the 6 cases loses (1 - 0) / 2 classes, a mean of -0.3,
    where leaving NaN out would have found the two runs identical; the means agree with it."""
    (fp,) = compare(false_positives(), "base", "Dice")
    assert fp["verdict"] == "worse" and fp["n_cases"] == 10
    assert fp["mean_difference"] == pytest.approx(-0.5 * 6 / 10)
    assert paired_differences(false_positives(), "base", "Dice")["fp"]["c0"] == pytest.approx(-0.5)
    assert paired_differences(false_positives(), "base", "Dice")["fp"]["c9"] == 0.0
    assert fp["baseline_mean"] == pytest.approx(np.mean([(0.8 + 0.001 * c + (1.0 if c < 6 else 0.8 + 0.001 * c)) / 2
                                                         for c in range(10)]))
    assert fp["variant_mean"] - fp["baseline_mean"] == pytest.approx(fp["mean_difference"])
    assert fp["absent_class"] == "a class absent from a case and not predicted scores 1 (recorded NaN)"


def test_a_distance_counts_an_absent_class_not_predicted_as_0_mm():
    """HD95 is NaN where a class is in neither map and the image's diagonal (here 50 mm) where it is
    predicted without being there: the pair is (0, 50), worse by 25 mm per case over its two classes."""
    (fp,) = compare(false_positives("HD95", hit=3.0, wrong=50.0), "base", "HD95")
    assert fp["verdict"] == "worse" and fp["mean_difference"] == pytest.approx(25.0 * 6 / 10)
    assert fp["absent_class"] == "a class absent from a case and not predicted scores 0 mm (recorded NaN)"


def test_the_seed_spread_reads_nan_by_the_same_rule():
    """Seed 0 absent and not predicted in class 2 of every case (1), seed 1 predicted there (0): the
    seeds' means are about 0.9 and 0.4, not 0.8 twice."""
    rows = [{**r, "variant": "base", "seed": seed} for seed, variant in ((0, "base"), (1, "fp"))
            for r in false_positives(absent_in=10) if r["variant"] == variant]
    means = [np.mean([(0.8 + 0.001 * c + second) / 2 for c in range(10)]) for second in (1.0, 0.0)]
    assert seed_spread(rows, "base", "Dice") == pytest.approx(np.std(means, ddof=1))


def test_a_nan_betti_error_is_refused_as_a_class_not_scored():
    rows = [row("base", 0, 0, "a", 1, "Betti0 error", math.nan), row("v", 0, 0, "a", 1, "Betti0 error", 1.0)]
    with pytest.raises(ValueError, match=r"variant 'base' has a NaN Betti0 error for fold 0, seed 0, case 'a', "
                                         r"class 1: .* the class was not scored there"):
        paired_differences(rows, "base", "Betti0 error")


def test_a_missing_pair_is_an_error_naming_it():
    rows = [r for r in hand_table() if not (r["variant"] == "v" and r["seed"] == 1 and r["case"] == "b")]
    with pytest.raises(ValueError, match=r"variant 'v' has no score where baseline 'base' has one: "
                                         r"fold 0, seed 1, case 'b', class 1; fold 0, seed 1, case 'b', class 2"):
        paired_differences(rows, "base", "Dice")
    rows = hand_table() + [row("v", 1, 0, "d", 1, "Dice", 0.9)]
    with pytest.raises(ValueError, match=r"baseline 'base' has no score where variant 'v' has one: "
                                         r"fold 1, seed 0, case 'd', class 1"):
        paired_differences(rows, "base", "Dice")


def test_a_duplicate_score_or_an_absent_baseline_is_an_error():
    with pytest.raises(ValueError, match="variant 'v' has two Dice scores for fold 0, seed 0, case 'a', class 1"):
        paired_differences(hand_table() + [row("v", 0, 0, "a", 1, "Dice", 0.6)], "base", "Dice")
    with pytest.raises(ValueError, match="baseline 'plain' has no Dice scores"):
        paired_differences(hand_table(), "plain", "Dice")


def sweep():
    """20 cases over 2 folds, 3 seeds, 2 classes. "edge": +0.02 Dice on every case plus noise and 0.5 mm
    lower HD95; "copy": the baseline's scores; "blurred": Dice as the baseline, HD95 1 mm higher plus noise."""
    rng = np.random.default_rng(0)
    rows = []
    for case in range(20):
        case_dice, case_hd95 = rng.uniform(0.7, 0.9), rng.uniform(3.0, 8.0)  # how hard the case is
        for seed in range(3):
            for class_ in (1, 2):
                dice = case_dice + rng.normal(0, 0.01)
                hd95 = case_hd95 + rng.normal(0, 0.5)
                scored = {
                    "baseline": (dice, hd95),
                    "edge": (dice + 0.02 + rng.normal(0, 0.01), hd95 - 0.5 + rng.normal(0, 0.3)),
                    "copy": (dice, hd95),
                    "blurred": (dice, hd95 + 1.0 + rng.normal(0, 0.5)),
                }
                for variant, (variant_dice, variant_hd95) in scored.items():
                    rows.append(row(variant, case % 2, seed, f"case_{case:02d}", class_, "Dice", variant_dice))
                    rows.append(row(variant, case % 2, seed, f"case_{case:02d}", class_, "HD95", variant_hd95))
    return rows


def test_a_planted_improvement_is_better_and_a_copy_is_no_difference():
    results = {r["variant"]: r for r in compare(sweep(), "baseline", "Dice")}
    assert list(results) == ["edge", "copy", "blurred"]
    edge = results["edge"]
    assert edge["verdict"] == "better"
    assert edge["n_cases"] == 20
    assert 0 < edge["ci_low"] < 0.02 < edge["ci_high"]
    assert edge["mean_difference"] == pytest.approx(0.02, abs=0.003)
    assert edge["p_wilcoxon"] < 1e-4
    copy = results["copy"]
    assert copy["mean_difference"] == 0.0 and copy["ci_low"] == 0.0 and copy["ci_high"] == 0.0
    assert copy["p_wilcoxon"] == 1.0
    assert copy["verdict"] == "no difference found (could detect ±0)"
    assert copy["seed_std"] == pytest.approx(seed_spread(sweep(), "baseline", "Dice"))
    p_values = [r["p_wilcoxon"] for r in results.values()]
    assert [r["p_holm"] for r in results.values()] == pytest.approx(holm(p_values))


def test_higher_distance_is_worse_and_lower_distance_is_better():
    results = {r["variant"]: r for r in compare(sweep(), "baseline", "HD95")}
    assert results["blurred"]["verdict"] == "worse"
    assert results["blurred"]["ci_low"] > 0
    assert results["edge"]["verdict"] == "better"
    assert results["edge"]["ci_high"] < 0


def test_no_difference_says_what_the_sweep_could_have_detected():
    rows = [r for r in sweep() if r["variant"] in ("baseline", "noisy")]
    rng = np.random.default_rng(5)
    rows += [{**r, "variant": "noisy", "value": r["value"] + rng.normal(0, 0.02)}
             for r in sweep() if r["variant"] == "baseline"]
    (noisy,) = compare(rows, "baseline", "Dice")
    differences = list(paired_differences(rows, "baseline", "Dice")["noisy"].values())
    assert noisy["ci_low"] < 0 < noisy["ci_high"]
    assert noisy["verdict"] == f"no difference found (could detect ±{minimum_detectable_difference(differences):.3g})"


def test_case_seed_spread_is_each_cases_std_over_seeds():
    # v: case a 0.7, 0.6 (class means of 0.5 + (0.1, 0.3) and 0.5 + (0.0, 0.2)); b 0.4, 0.6; c 0.9, 0.6
    spread = case_seed_spread(hand_table(), "v", "Dice")
    assert spread == pytest.approx({case: np.std(pair, ddof=1) for case, pair in
                                    {"a": (0.7, 0.6), "b": (0.4, 0.6), "c": (0.9, 0.6)}.items()})
    one_seed = [r for r in hand_table() if r["seed"] == 0]
    assert all(math.isnan(v) for v in case_seed_spread(one_seed, "v", "Dice").values())


def test_agreement_within_the_seed_spread():
    """A copy of the baseline agrees; a variant that moves every case by more than the baseline's per-case
    seed spread does not, whichever way each case moves; one that moves them by much less does."""
    rows = [r for r in sweep() if r["variant"] in ("baseline", "copy")]  # per-case seed spread about 0.01
    spread = float(np.mean(list(case_seed_spread(rows, "baseline", "Dice").values())))
    rng = np.random.default_rng(4)
    for name, size in (("moved", 4 * spread), ("nudged", spread / 4)):
        signs = {f"case_{case:02d}": rng.choice([-1.0, 1.0]) for case in range(20)}
        rows += [{**r, "variant": name, "value": r["value"] + signs[r["case"]] * size}
                 for r in sweep() if r["variant"] == "baseline" and r["metric"] == "Dice"]
    rows = [r for r in rows if r["metric"] == "Dice"]
    results = {r["variant"]: r for r in agreement(rows, "baseline")}
    assert results["copy"]["agrees"] and results["copy"]["mean_abs_difference"] == 0.0
    assert results["copy"]["seed_spread"] == pytest.approx(spread) and results["copy"]["basis"] == "seed spread"
    assert not results["moved"]["agrees"] and results["moved"]["mean_abs_difference"] == pytest.approx(4 * spread)
    assert results["nudged"]["agrees"]
    assert abs(results["moved"]["worst_difference"]) == pytest.approx(4 * spread)
    # one seed: no spread, the tolerance stands in
    (one_seed,) = agreement([r for r in rows if r["seed"] == 0 and r["variant"] in ("baseline", "moved")],
                            "baseline", tolerance=1.0)
    assert one_seed["basis"] == "tolerance" and one_seed["seed_spread"] == 1.0 and one_seed["agrees"]


def test_a_handful_of_cases_gets_no_verdict_however_far_from_zero():
    rows = [r for r in sweep() if r["metric"] == "Dice" and r["variant"] in ("baseline", "edge")
            and r["case"] in ("case_00", "case_01", "case_02", "case_03")]
    (edge,) = compare(rows, "baseline", "Dice")
    assert edge["n_cases"] == 4 and edge["ci_low"] > 0
    assert edge["verdict"] == "too few cases for a verdict (4; at least 5)"
    (single,) = compare([r for r in rows if r["case"] == "case_00"], "baseline", "Dice")
    assert single["verdict"].startswith("too few cases")
