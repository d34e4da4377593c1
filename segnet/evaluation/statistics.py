"""Paired statistics for an ablation sweep: is a variant better than the baseline, or could the sweep not tell?

The sweep trains each variant over seeds and cross-validation folds and scores every case and class
(segnet.evaluation.evaluator: Dice, HD95 in mm, NSD). Scores come in as a tidy table, one row per
score with the keys variant, fold, seed, case, class, metric and value.

Variants are compared with the baseline on the same cases, so the statistics are of paired
differences (variant minus baseline on the same fold, seed, case and class). The case is the unit of
resampling: a case's differences are averaged over its classes, then over the runs (folds and seeds)
that scored it, so each case counts once however many seeds the sweep ran; treating every seed's
score as an independent case would shrink the intervals without any new patients behind them.

A class absent from a case's reference and not predicted is perfect there (ABSENT_SCORE: Dice 1,
HD95 0 mm), the rule of MONAI's ignore_empty=False and of the BraTS evaluation. The evaluator and
validation record NaN for it (nnU-Net's convention, kept in summary.json and metrics.json) and 0
(HD95: the image's diagonal) where the class is predicted without being there; leaving NaN out
would drop exactly the pairs where one side starts predicting a structure in cases that lack it,
so the statistics read NaN as the perfect score, in the differences, the means and the spreads
alike. compare names the rule in its rows (absent_class).

A verdict of "better" or "worse" needs the percentile bootstrap interval of the mean difference to
exclude zero; otherwise the verdict says how large a difference the sweep could have detected, so
that "no difference found" is not read as "no difference". The interval is per variant; the Holm
adjusted Wilcoxon p-values are the ones to quote when several variants are tested against one baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

HIGHER_IS_BETTER = {"Dice": True, "IoU": True, "NSD": True, "HD95": False, "clDice": True, "Betti0 error": False,
                    "Betti1 error": False}

# The score of a class absent from a case's reference and not predicted, recorded as NaN (module docstring).
# The Betti errors are counts, 0 for such a class as computed: their NaN marks a class that was not
# scored (outside data.topology_classes), which the statistics refuse rather than guess at.
ABSENT_SCORE = {"Dice": 1.0, "IoU": 1.0, "NSD": 1.0, "clDice": 1.0, "HD95": 0.0}

Key = tuple[Hashable, ...]  # (fold, seed, case, class) within one variant, or a projection of it

MAX_LISTED = 5  # missing pairs named in an error; the rest are counted
MIN_CASES = 5  # fewer cases give no verdict: a bootstrap over 2 to 4 values is their range, not an interval


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of metric is an improvement, so that a signed difference can be called
    better or worse (a distance such as HD95 improves as it falls)."""
    if metric not in HIGHER_IS_BETTER:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(HIGHER_IS_BETTER)}")
    return HIGHER_IS_BETTER[metric]


def absent_rule(metric: str) -> str:
    """What a class absent from a case and not predicted scores in these statistics, in words, for
    the output of every comparison."""
    if metric in ABSENT_SCORE:
        unit = " mm" if metric == "HD95" else ""
        return f"a class absent from a case and not predicted scores {ABSENT_SCORE[metric]:g}{unit} (recorded NaN)"
    return f"{metric} scores a class absent from a case and not predicted itself; NaN (a class not scored) is refused"


def _score(value: Any, metric: str, variant: str, key: Key) -> float:
    """A recorded score as the statistics read it: NaN, a class absent and not predicted, as ABSENT_SCORE."""
    value = float(value)
    if not math.isnan(value):
        return value
    if metric not in ABSENT_SCORE:
        raise ValueError(f"variant {variant!r} has a NaN {metric} for {_describe(key)}: a {metric} is never NaN "
                         f"where it was scored (0 for a class absent from both sides), so the class was not scored "
                         f"there; leave such rows out of the table")
    return ABSENT_SCORE[metric]


def _runs_by_variant(scores: Sequence[Mapping[str, Any]], metric: str) -> dict[str, dict[Key, float]]:
    """One metric's scores per variant, keyed by (fold, seed, case, class), NaN read by the absent
    rule (_score); a score given twice is an error, since there would be no telling which one the
    pairing should use."""
    runs: dict[str, dict[Key, float]] = {}
    for row in scores:
        if row["metric"] != metric:
            continue
        run = runs.setdefault(row["variant"], {})
        key = (row["fold"], row["seed"], row["case"], row["class"])
        if key in run:
            raise ValueError(f"variant {row['variant']!r} has two {metric} scores for {_describe(key)}")
        run[key] = _score(row["value"], metric, row["variant"], key)
    if not runs:
        raise ValueError(f"no {metric} scores in the table")
    return runs


def _describe(key: Key) -> str:
    """A (fold, seed, case, class) key as words, for error messages."""
    fold, seed, case, class_ = key
    return f"fold {fold!r}, seed {seed!r}, case {case!r}, class {class_!r}"


def _missing(absent_from: str, present_in: str, keys: list[Key]) -> str:
    """One sentence naming the scores one side of the pairing lacks (the first few, then a count)."""
    listed = "; ".join(_describe(key) for key in keys[:MAX_LISTED])
    more = f"; and {len(keys) - MAX_LISTED} more" if len(keys) > MAX_LISTED else ""
    return f"{absent_from} has no score where {present_in} has one: {listed}{more}"


def _check_pairs(variant: str, run: dict[Key, float], baseline: str, base: dict[Key, float]) -> None:
    """Every score of the variant needs its baseline counterpart and the other way round: an unpaired
    score would either be dropped silently or change which cases the comparison is about."""
    problems = []
    if lacking := [key for key in base if key not in run]:
        problems.append(_missing(f"variant {variant!r}", f"baseline {baseline!r}", lacking))
    if unpaired := [key for key in run if key not in base]:
        problems.append(_missing(f"baseline {baseline!r}", f"variant {variant!r}", unpaired))
    if problems:
        raise ValueError("unpaired scores: " + " | ".join(problems))


def _average(table: dict[Key, float], group: Callable[[Key], Key]) -> dict[Key, float]:
    """Mean of the values whose keys group to the same key, groups in order of first appearance; this
    is how classes, then runs, are averaged away."""
    grouped: dict[Key, list[float]] = {}
    for key, value in table.items():
        grouped.setdefault(group(key), []).append(value)
    return {key: float(np.mean(values)) for key, values in grouped.items()}


def _per_case(table: dict[Key, float]) -> dict[Hashable, float]:
    """From (fold, seed, case, class) values to one value per case: the mean over classes within each
    run, then over the runs that scored the case."""
    per_run = _average(table, lambda key: key[:3])
    return {key[0]: value for key, value in _average(per_run, lambda key: key[2:3]).items()}


def _run_of(scores: Sequence[Mapping[str, Any]], variant: str, metric: str) -> dict[Key, float]:
    """One variant's scores of one metric, keyed by (fold, seed, case, class)."""
    runs = _runs_by_variant(scores, metric)
    if variant not in runs:
        raise ValueError(f"variant {variant!r} has no {metric} scores; variants: {', '.join(map(str, runs))}")
    return runs[variant]


def paired_differences(
    scores: Sequence[Mapping[str, Any]], baseline: str, metric: str
) -> dict[str, dict[Hashable, float]]:
    """Per variant other than the baseline, each case's mean paired difference (variant minus
    baseline), averaged over classes and then over seeds (and folds, where a case was scored in
    several), so that each case counts once. The sign is raw: for HD95 a negative difference is an
    improvement (higher_is_better). Raises ValueError naming any score without its pair."""
    runs = _runs_by_variant(scores, metric)
    if baseline not in runs:
        raise ValueError(f"baseline {baseline!r} has no {metric} scores; variants: {', '.join(map(str, runs))}")
    base = runs.pop(baseline)
    differences = {}
    for variant, run in runs.items():
        _check_pairs(variant, run, baseline, base)
        differences[variant] = _per_case({key: run[key] - base[key] for key in base})
    return differences


def mean_score(scores: Sequence[Mapping[str, Any]], variant: str, metric: str) -> float:
    """The variant's mean score over cases, each case its mean over classes, then runs (the absent
    rule applied): the mean whose difference from the baseline's is compare's mean_difference."""
    return float(np.mean(list(_per_case(_run_of(scores, variant, metric)).values())))


def _per_seed_case(scores: Sequence[Mapping[str, Any]], variant: str, metric: str) -> dict[Key, float]:
    """The variant's score per (seed, case): the mean over classes within each run, then over the
    folds that scored the case under that seed."""
    return _average(_average(_run_of(scores, variant, metric), lambda key: key[:3]), lambda key: key[1:3])


def seed_spread(scores: Sequence[Mapping[str, Any]], variant: str, metric: str) -> float:
    """Standard deviation over seeds of the variant's mean score (over cases, each the mean over its
    classes): how much retraining alone moves the result, to set a difference against. NaN with
    fewer than two seeds."""
    per_seed = _average(_per_seed_case(scores, variant, metric), lambda key: key[:1])
    return float(np.std(list(per_seed.values()), ddof=1)) if len(per_seed) > 1 else math.nan


def case_seed_spread(scores: Sequence[Mapping[str, Any]], variant: str, metric: str) -> dict[Hashable, float]:
    """Per case, the standard deviation (ddof 1) over seeds of the variant's score of that case (the
    mean over its classes, then over the folds that scored it in one seed): how much retraining
    alone moves one case. NaN for a case scored under fewer than two seeds."""
    by_case: dict[Hashable, list[float]] = {}
    for (_, case), value in _per_seed_case(scores, variant, metric).items():
        by_case.setdefault(case, []).append(value)
    return {case: float(np.std(values, ddof=1)) if len(values) > 1 else math.nan for case, values in by_case.items()}


def agreement(
    scores: Sequence[Mapping[str, Any]], baseline: str, metric: str = "Dice", tolerance: float = 0.02
) -> list[dict[str, Any]]:
    """Whether each variant scores every case as the baseline does, within what retraining alone moves
    (the backend ablation's accuracy check: a backend computes the same function as the python one,
    so it should change no case more than another seed would).

    Per variant: delta_c, the case's paired difference (variant minus baseline, averaged over classes
    then seeds, as paired_differences), and sigma_c, the baseline's seed spread of the case
    (case_seed_spread). The variant agrees when mean_c |delta_c| <= mean_c sigma_c (mean_abs_difference
    against seed_spread). Why that bound: a backend whose rounding makes training diverge from the
    python one's as much as another seed would gives per-seed differences of standard deviation
    sigma * sqrt(2), so over n seeds E|delta_c| = sigma * sqrt(2 / n) * sqrt(2 / pi), 0.65 sigma for
    n = 3, below E[sigma_c] = 0.89 sigma: such a backend passes (with 2 seeds the two are equal and it
    passes about half the time: sweep 3 or more), while one that moves cases by more than retraining
    does, or is biased, fails; a backend with identical arithmetic gives 0. With fewer than two seeds there is no
    spread and `tolerance` stands in for it (basis "tolerance"). worst_case and worst_difference name the
    case with the largest |delta_c|."""
    differences = paired_differences(scores, baseline, metric)
    spreads = [v for v in case_seed_spread(scores, baseline, metric).values() if not math.isnan(v)]
    limit, basis = (float(np.mean(spreads)), "seed spread") if spreads else (tolerance, "tolerance")
    rows = []
    for variant, per_case in differences.items():
        worst = max(per_case, key=lambda case: abs(per_case[case]))
        mean_abs = float(np.mean(np.abs(list(per_case.values()))))
        rows.append({"variant": variant, "mean_abs_difference": mean_abs, "seed_spread": limit, "basis": basis,
                     "worst_case": worst, "worst_difference": per_case[worst], "agrees": mean_abs <= limit})
    return rows


def bootstrap_ci(
    differences: Sequence[float], confidence: float = 0.95, resamples: int = 10000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean paired difference, resampling cases with replacement:
    it needs no normality of the per-case differences, which for Dice are bounded and often skewed.
    Vectorized: holds a resamples x cases index array at once."""
    values = np.asarray(differences, dtype=float)
    if values.size == 0:
        raise ValueError("no differences to bootstrap")
    picks = np.random.default_rng(seed).integers(0, values.size, size=(resamples, values.size))
    means = values[picks].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def wilcoxon_p(differences: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value of the paired differences (scipy's). Differences that are
    all zero (a variant identical to the baseline) carry no evidence of a difference: p = 1, where
    scipy would have no non-zero difference to rank."""
    values = np.asarray(differences, dtype=float)
    if not np.any(values):
        return 1.0
    return float(stats.wilcoxon(values, alternative="two-sided").pvalue)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order: the k-th smallest of m is multiplied by
    m - k + 1, made non-decreasing in that order (step-down) and capped at 1. Controls the family-wise
    error over the variants compared with one baseline, without Bonferroni's loss of power."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (p.size - np.arange(p.size))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return adjusted.tolist()


def minimum_detectable_difference(differences: Sequence[float], confidence: float = 0.95, power: float = 0.8) -> float:
    """The mean paired difference the sweep would have detected with the given power at the given
    confidence (two-sided), so that "no difference found" says how small a difference could hide.
    Normal approximation: (z_{1-alpha/2} + z_{power}) * sd / sqrt(n), with sd the sample standard
    deviation of the n per-case differences; it treats sd as known (no t correction), so it is
    optimistic for a handful of cases."""
    values = np.asarray(differences, dtype=float)
    if values.size < 2:
        raise ValueError(f"{values.size} case(s): a standard deviation needs at least 2")
    z = stats.norm.ppf(1 - (1 - confidence) / 2) + stats.norm.ppf(power)
    return float(z * np.std(values, ddof=1) / math.sqrt(values.size))


def verdict(ci: tuple[float, float], metric: str, detectable: float, n_cases: int = MIN_CASES) -> str:
    """The call a reader acts on: better or worse only when the interval excludes zero (the direction
    by the metric) over at least MIN_CASES cases, else no difference found, with the difference the
    sweep could have detected."""
    if n_cases < MIN_CASES:
        return f"too few cases for a verdict ({n_cases}; at least {MIN_CASES})"
    low, high = ci
    if low > 0 or high < 0:
        return "better" if (low > 0) == higher_is_better(metric) else "worse"
    return f"no difference found (could detect ±{detectable:.3g})"


def compare(
    scores: Sequence[Mapping[str, Any]],
    baseline: str,
    metric: str,
    confidence: float = 0.95,
    power: float = 0.8,
    resamples: int = 10000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Per variant (in order of first appearance in scores), the paired comparison with the baseline on
    one metric: n_cases, baseline_mean and variant_mean (mean_score), mean_difference (variant minus
    baseline: their difference), seed_std (the variant's seed-to-seed spread), ci_low/ci_high
    (bootstrap), p_wilcoxon, p_holm (adjusted over the variants compared here), the verdict and
    absent_class (absent_rule: how a class absent from a case and not predicted was scored)."""
    differences = paired_differences(scores, baseline, metric)
    p_values = [wilcoxon_p(list(per_case.values())) for per_case in differences.values()]
    rows = []
    for (variant, per_case), p, adjusted in zip(differences.items(), p_values, holm(p_values), strict=True):
        values = list(per_case.values())
        ci = bootstrap_ci(values, confidence, resamples, seed)
        detectable = minimum_detectable_difference(values, confidence, power) if len(values) > 1 else math.nan
        rows.append({
            "variant": variant,
            "n_cases": len(values),
            "baseline_mean": mean_score(scores, baseline, metric),
            "variant_mean": mean_score(scores, variant, metric),
            "mean_difference": float(np.mean(values)),
            "seed_std": seed_spread(scores, variant, metric),
            "ci_low": ci[0],
            "ci_high": ci[1],
            "p_wilcoxon": p,
            "p_holm": adjusted,
            "verdict": verdict(ci, metric, detectable, len(values)),
            "absent_class": absent_rule(metric),
        })
    return rows
