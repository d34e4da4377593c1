"""Report of an ablation sweep: python scripts/ablation_report.py SWEEP_DIR [--baseline NAME] [--kind layer]

Any sweep (segnet.evaluation.ablation tells the kinds apart): experiment=ablation_placement
(variants against variant=none), experiment=ablation_recipe (recipes against recipe=plan, each
budget on its own), experiment=ablation_loss (losses against dice_ce, each edge placement on its
own; with --kind layer the placements against none, each loss on its own) or
experiment=ablation_backends (each backend, and each under compile=true, against python eager). For
every metric the runs recorded (validation Dice, HD95 in mm, NSD) and every variant: the per-case
paired difference with the baseline on the same fold and seed (variant minus baseline, averaged
over classes, then seeds), its mean, the variant's seed-to-seed spread, the 95 % bootstrap interval
over cases, Wilcoxon's p and Holm's over the variants, and a verdict only where the interval
excludes zero (better or worse by the metric's direction: HD95 improves as it falls), else the
difference the sweep could have detected (segnet.evaluation.statistics); with each variant's
parameters, median step time, samples/s and peak memory. A class absent from a case and not
predicted counts as perfect (Dice 1, HD95 0 mm), so a variant that predicts a structure in cases
without it is scored worse there; each table says so in a line.

A backend sweep also gets a table of its runs (step time, throughput, peak memory, speed-up over
python eager's mean step time) and the accuracy check of segnet.evaluation.statistics.agreement:
a backend fails it when its per-case Dice moves, averaged over cases, by more than the python
runs' per-case seed spread (--dice-tolerance where the sweep has one seed).

Writes ablation.md (what it prints), ablation.csv (one row per group, metric and variant) and
ablation.png (the paired per-case differences and their intervals) into SWEEP_DIR; the layer view
writes ablation-layer.md, .csv and .png beside them. A run without
metrics.json is reported as failed. Exits 1 when anything is flagged or failed.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

from segnet.evaluation.ablation import COSTS, METRIC_KEYS, Sweep, load_sweep, run_folders
from segnet.evaluation.statistics import agreement, compare, higher_is_better, paired_differences

UNITS = {"HD95": " (mm)"}


def heading(group: str, metric: str) -> str:
    direction = ("higher is better" if higher_is_better(metric)
                 else "lower is better: a negative Δ is an improvement")
    return f"### {group + ': ' if group else ''}{metric}{UNITS.get(metric, '')}, {direction}"


def paired_rows(sweep: Sweep, baseline: str) -> tuple[list[dict], dict, list[str]]:
    """(one row per group, metric and variant; {(group, metric): {variant: {case: difference}}};
    flags for comparisons the sweep cannot make)."""
    rows, differences, flags = [], {}, []
    for group in sweep.groups():
        scores = sweep.in_group(group)
        for metric in METRIC_KEYS:
            if not any(row["metric"] == metric for row in scores):
                continue
            try:
                compared = compare(scores, baseline, metric)
                differences[group, metric] = paired_differences(scores, baseline, metric)
            except ValueError as error:
                flags.append(f"{group + ' ' if group else ''}{metric}: no comparison ({error})")
                continue
            rows += [{"group": group, "metric": metric, "higher_is_better": higher_is_better(metric), **row,
                      **sweep.costs[group, row["variant"]]} for row in compared]
    return rows, differences, flags


def paired_tables(rows: list[dict]) -> str:
    blocks = []
    for group, metric in dict.fromkeys((row["group"], row["metric"]) for row in rows):
        panel = [r for r in rows if (r["group"], r["metric"]) == (group, metric)]
        lines = [heading(group, metric), "", f"Per case: {panel[0]['absent_class']}.", "",
                 f"| variant | cases | parameters | step ms | peak MB | mean paired Δ {metric} | seed std "
                 "| 95 % interval | Wilcoxon p | Holm p | verdict |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in panel:
            lines.append(
                f"| {row['variant']} | {row['n_cases']} | {row['parameters']:.0f} | {row['step_time_ms_median']:.1f} "
                f"| {row['peak_memory_mb']:.0f} | {row['mean_difference']:+.4f} | {row['seed_std']:.4f} "
                f"| [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}] | {row['p_wilcoxon']:.3g} | {row['p_holm']:.3g} "
                f"| {row['verdict']} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def runs_table(sweep: Sweep, baseline: str) -> tuple[str, list[str]]:
    """A backend sweep's runs, python's first, each with its speed-up over the python eager runs'
    mean median step time."""
    lines = ["| run | backend | compile | seed | step ms (median) | samples/s | peak memory MB | val Dice "
             "| speed-up vs python eager |", "|---|---|---|---|---|---|---|---|---|"]
    base_steps = [run["metrics"]["step_time_ms_median"] for run in sweep.runs
                  if run["metrics"] and run["variant"] == baseline]
    base_step = sum(base_steps) / len(base_steps) if base_steps else math.nan
    flags = [] if base_steps else [f"no {baseline} run finished: speed-ups and accuracy checks need one "
                                   f"(op.backend={baseline} compile=false)"]
    order = sorted(sweep.runs, key=lambda r: (r["variant"] != baseline, r["variant"], str(r["seed"]),
                                              r["folder"].name))
    for run in order:
        backend, _, compiled = run["variant"].partition(" + ")
        cells = f"| {run['folder'].name} | {backend} | {bool(compiled)} | {run['seed']} |"
        m = run["metrics"]
        if m is None:
            lines.append(f"{cells} failed | | | | |")
            continue
        lines.append(f"{cells} {m['step_time_ms_median']:.1f} | {m['samples_per_s']:.1f} "
                     f"| {m['peak_memory_mb']:.0f} | {m['val_dice_mean']:.4f} "
                     f"| {base_step / m['step_time_ms_median']:.2f}x |")
    return "\n".join(lines), flags


def cost_table(sweep: Sweep, baseline: str) -> str:
    """Each variant's mean costs over its runs, and their ratios to the baseline's (speed-up: the
    baseline's step time over the variant's; throughput and memory: the variant's over the baseline's)."""
    lines = ["| variant | step ms | speed-up | samples/s | throughput ratio | peak MB | memory ratio |",
             "|---|---|---|---|---|---|---|"]
    for group, variant in sorted(sweep.costs, key=lambda label: (label[1] != baseline, label)):
        cost, base = sweep.costs[group, variant], sweep.costs.get((group, baseline))
        if base is None:
            return ""
        step, rate, memory = cost["step_time_ms_median"], cost["samples_per_s"], cost["peak_memory_mb"]
        lines.append(f"| {variant} | {step:.1f} | {base['step_time_ms_median'] / step:.2f}x | {rate:.1f} "
                     f"| {rate / base['samples_per_s']:.2f}x | {memory:.0f} | {memory / base['peak_memory_mb']:.2f}x |")
    return "\n".join(lines)


def agreement_table(sweep: Sweep, baseline: str, tolerance: float) -> tuple[str, list[str]]:
    """The accuracy check of each backend against python eager (statistics.agreement on Dice)."""
    try:
        rows = agreement(sweep.scores, baseline, "Dice", tolerance)
    except ValueError as error:
        return "", [f"accuracy check not made: {error}"]
    lines = [f"### Accuracy: per-case Dice against {baseline}'s, within the seed spread", "",
             "| variant | mean \\|Δ Dice\\| per case | allowed (basis) | worst case | its Δ | agrees |",
             "|---|---|---|---|---|---|"]
    flags = []
    for row in rows:
        lines.append(f"| {row['variant']} | {row['mean_abs_difference']:.4f} | {row['seed_spread']:.4f} "
                     f"({row['basis']}) | {row['worst_case']} | {row['worst_difference']:+.4f} "
                     f"| {'yes' if row['agrees'] else 'NO'} |")
        if not row["agrees"]:
            flags.append(f"{row['variant']}: per-case Dice differs from {baseline}'s by "
                         f"{row['mean_abs_difference']:.4f} on average, more than the {row['basis']} "
                         f"{row['seed_spread']:.4f} (worst: {row['worst_case']}, {row['worst_difference']:+.4f})")
    return "\n".join(lines), flags


def plot_differences(differences: dict, rows: list[dict], path: Path) -> None:
    """One panel per group and metric: each case's paired difference, the mean and its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(differences)
    groups = list(dict.fromkeys(group for group, _ in panels))
    metrics = list(dict.fromkeys(metric for _, metric in panels))
    width = max(len(d) for d in differences.values())
    fig, axes = plt.subplots(len(groups), len(metrics), squeeze=False,
                             figsize=((1.4 * width + 2) * len(metrics), 3.6 * len(groups)))
    for (group, metric), per_variant in differences.items():
        ax = axes[groups.index(group)][metrics.index(metric)]
        panel = [r for r in rows if (r["group"], r["metric"]) == (group, metric)]
        for x, row in enumerate(panel):
            values = list(per_variant[row["variant"]].values())
            ax.scatter([x] * len(values), values, s=10, alpha=0.5, color="#1f77b4")
            ax.errorbar([x], [row["mean_difference"]], yerr=[[row["mean_difference"] - row["ci_low"]],
                                                             [row["ci_high"] - row["mean_difference"]]],
                        fmt="o", color="black", capsize=4)
        ax.axhline(0.0, color="#888888", linewidth=1)
        ax.set_xticks(range(len(panel)), [r["variant"] for r in panel], rotation=30, ha="right")
        better = "up" if higher_is_better(metric) else "down"
        ax.set_title(f"{group + ' ' if group else ''}{metric}{UNITS.get(metric, '')} ({better} is better)")
        ax.set_ylabel("variant - baseline, per case")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_csv(rows: list[dict], path: Path) -> None:
    fields = ["group", "metric", "higher_is_better", "variant", "n_cases", "mean_difference", "seed_std", "ci_low",
              "ci_high", "p_wilcoxon", "p_holm", "verdict", "absent_class", *COSTS]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def report(sweep_dir: Path, baseline: str | None, dice_tolerance: float,
           kind: str | None = None) -> tuple[str, list[str]]:
    sweep = load_sweep(sweep_dir, kind)
    stem = "ablation" if kind is None else f"ablation-{kind}"
    baseline = baseline or sweep.baseline
    blocks, flags = [f"## {sweep.kind} ablation of {sweep_dir}: every variant against {baseline}"], []
    if sweep.kind == "backends":
        table, table_flags = runs_table(sweep, baseline)
        check, check_flags = agreement_table(sweep, baseline, dice_tolerance)
        blocks += [table, cost_table(sweep, baseline), check]
        flags += table_flags + check_flags
    rows, differences, compare_flags = paired_rows(sweep, baseline)
    blocks.append(paired_tables(rows))
    flags += compare_flags + [f"run {failed}" for failed in sweep.failed]
    write_csv(rows, sweep_dir / f"{stem}.csv")
    if differences:
        plot_differences(differences, rows, sweep_dir / f"{stem}.png")
    return "\n\n".join(block for block in blocks if block), flags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--baseline", default=None,
                        help="the variant the others are paired with "
                             "(default: none, plan, dice_ce or python by the sweep)")
    parser.add_argument("--kind", choices=["layer"], default=None,
                        help="layer: a loss sweep's edge placements against none, within each loss")
    parser.add_argument("--dice-tolerance", type=float, default=0.02,
                        help="backend sweeps of one seed: the mean per-case Dice gap allowed, for want of a spread")
    args = parser.parse_args(argv)
    if not args.sweep_dir.is_dir():
        parser.error(f"{args.sweep_dir} is not a folder; pass the sweep folder (multirun/<task>/<time>)")
    if not run_folders(args.sweep_dir):
        parser.error(f"{args.sweep_dir} holds no runs (no */.hydra/config.yaml)")
    markdown, flags = report(args.sweep_dir, args.baseline, args.dice_tolerance, args.kind)
    text = markdown + ("\n\n" + "\n".join(f"- FLAG: {f}" for f in flags) if flags else "") + "\n"
    print(text)
    stem = "ablation" if args.kind is None else f"ablation-{args.kind}"
    (args.sweep_dir / f"{stem}.md").write_text(text)
    print(f"wrote {stem}.md, {stem}.csv and {stem}.png in {args.sweep_dir}")
    return 1 if flags else 0


if __name__ == "__main__":
    sys.exit(main())
