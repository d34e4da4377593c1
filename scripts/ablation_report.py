"""Report of an ablation sweep: python scripts/ablation_report.py SWEEP_DIR

A backend sweep (experiment=ablation_backends): reads each run's metrics.json and resolved
config (.hydra/config.yaml), prints a Markdown table (backend, compile, median step time,
samples/s, peak memory, validation Dice, speed-up over python eager) and writes ablation.md and
ablation.png into SWEEP_DIR. A run whose Dice differs from the python eager run's by more than
--dice-tolerance is flagged.

A placement sweep (experiment=ablation_placement, runs with a conf/variant/ choice): each
variant's validation Dice per case paired with variant=none's on the same fold and seed
(segnet.evaluation.statistics): mean paired difference, its 95 % bootstrap interval over cases,
Wilcoxon's p and Holm's over the variants, a verdict only where the interval excludes zero,
and each variant's parameters, step time and peak memory; ablation.md, ablation.csv and
ablation.png (the paired per-case differences with their intervals).

A run without metrics.json is reported as failed. Exits 1 when anything is flagged or failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from segnet.evaluation.ablation import COSTS, load_sweep, run_folders, variant_of
from segnet.evaluation.statistics import compare, paired_differences


@dataclass
class Run:
    folder: Path
    backend: str
    compile: bool
    metrics: dict | None

    @property
    def label(self) -> str:
        return f"{self.backend}{' + compile' if self.compile else ''}"


def load_runs(sweep_dir: Path) -> list[Run]:
    runs = []
    for config_path in sorted(sweep_dir.glob("*/.hydra/config.yaml")):
        folder = config_path.parent.parent
        config = OmegaConf.load(config_path)
        metrics_path = folder / "metrics.json"
        metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else None
        backend = metrics["backend"] if metrics else str(config.op.backend)
        runs.append(Run(folder, backend, bool(config.compile), metrics))
    return sorted(runs, key=lambda r: (r.backend != "python", r.backend, r.compile))


def baseline_of(runs: list[Run]) -> Run | None:
    done = [r for r in runs if r.metrics and r.backend == "python"]
    return next((r for r in done if not r.compile), done[0] if done else None)


def table(runs: list[Run], baseline: Run | None, dice_tolerance: float) -> tuple[str, list[str]]:
    lines = [
        "| run | backend | compile | step ms (median) | samples/s | peak memory MB | val Dice "
        "| speed-up vs python eager |",
        "|---|---|---|---|---|---|---|---|",
    ]
    flags = []
    base_step = baseline.metrics["step_time_ms_median"] if baseline else math.nan
    base_dice = baseline.metrics["val_dice_mean"] if baseline else math.nan
    for run in runs:
        name = run.folder.name
        if run.metrics is None:
            lines.append(f"| {name} | {run.backend} | {run.compile} | failed | | | | |")
            flags.append(f"run {name} ({run.label}) failed: no metrics.json in {run.folder}")
            continue
        m = run.metrics
        lines.append(
            f"| {name} | {run.backend} | {run.compile} | {m['step_time_ms_median']:.1f} | {m['samples_per_s']:.1f} "
            f"| {m['peak_memory_mb']:.0f} | {m['val_dice_mean']:.4f} | {base_step / m['step_time_ms_median']:.2f}x |"
        )
        if abs(m["val_dice_mean"] - base_dice) > dice_tolerance:
            flags.append(
                f"run {name} ({run.label}): val Dice {m['val_dice_mean']:.4f} differs from python eager's "
                f"{base_dice:.4f} by more than {dice_tolerance}"
            )
    if baseline is None:
        flags.append("no python run finished: speed-ups and Dice checks need one (op.backend=python)")
    return "\n".join(lines), flags


def plot(runs: list[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in runs if r.metrics]
    labels = [r.label for r in done]
    panels = [
        ("median step time (ms)", [r.metrics["step_time_ms_median"] for r in done]),
        ("samples / s", [r.metrics["samples_per_s"] for r in done]),
        ("peak memory (MB)", [r.metrics["peak_memory_mb"] for r in done]),
        ("validation Dice", [r.metrics["val_dice_mean"] for r in done]),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5))
    for ax, (title, values) in zip(axes, panels, strict=True):
        ax.bar(range(len(values)), values, color=["#888888" if "python" in label else "#1f77b4" for label in labels])
        ax.set_xticks(range(len(values)), labels, rotation=30, ha="right")
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def placement_table(rows: list[dict], costs: dict[str, dict[str, float]]) -> str:
    lines = ["| variant | cases | parameters | step ms | peak MB | mean paired Δ Dice | 95 % interval | Wilcoxon p "
             "| Holm p | verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        cost = costs[row["variant"]]
        lines.append(
            f"| {row['variant']} | {row['n_cases']} | {cost['parameters']:.0f} | {cost['step_time_ms_median']:.1f} "
            f"| {cost['peak_memory_mb']:.0f} | {row['mean_difference']:+.4f} | [{row['ci_low']:+.4f}, "
            f"{row['ci_high']:+.4f}] | {row['p_wilcoxon']:.3g} | {row['p_holm']:.3g} | {row['verdict']} |")
    return "\n".join(lines)


def plot_differences(differences: dict[str, dict], rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.6 * len(rows) + 2, 3.5))
    for x, row in enumerate(rows):
        values = list(differences[row["variant"]].values())
        ax.scatter([x] * len(values), values, s=10, alpha=0.5, color="#1f77b4")
        ax.errorbar([x], [row["mean_difference"]], yerr=[[row["mean_difference"] - row["ci_low"]],
                                                         [row["ci_high"] - row["mean_difference"]]],
                    fmt="o", color="black", capsize=4)
    ax.axhline(0.0, color="#888888", linewidth=1)
    ax.set_xticks(range(len(rows)), [r["variant"] for r in rows], rotation=30, ha="right")
    ax.set_ylabel("Dice - plain U-Net's, per case")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def placement_report(sweep_dir: Path, baseline: str) -> tuple[str, list[str]]:
    scores, costs, failed = load_sweep(sweep_dir)
    rows = compare(scores, baseline, "Dice")
    with open(sweep_dir / "ablation.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, [*rows[0], *COSTS])
        writer.writeheader()
        writer.writerows({**row, **costs[row["variant"]]} for row in rows)
    plot_differences(paired_differences(scores, baseline, "Dice"), rows, sweep_dir / "ablation.png")
    return placement_table(rows, costs), [f"run {f}" for f in failed]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--dice-tolerance", type=float, default=0.02, help="backend sweeps: allowed Dice gap")
    parser.add_argument("--baseline", default="none", help="placement sweeps: the variant the others are paired with")
    args = parser.parse_args(argv)
    if not args.sweep_dir.is_dir():
        parser.error(f"{args.sweep_dir} is not a folder; pass the sweep folder (multirun/<task>/<time>)")
    folders = run_folders(args.sweep_dir)
    if not folders:
        parser.error(f"{args.sweep_dir} holds no runs (no */.hydra/config.yaml)")
    if variant_of(folders[0]) is not None:
        markdown, flags = placement_report(args.sweep_dir, args.baseline)
    else:
        runs = load_runs(args.sweep_dir)
        markdown, flags = table(runs, baseline_of(runs), args.dice_tolerance)
        if any(r.metrics for r in runs):
            plot(runs, args.sweep_dir / "ablation.png")
    report = markdown + ("\n\n" + "\n".join(f"- FLAG: {f}" for f in flags) if flags else "") + "\n"
    print(report)
    (args.sweep_dir / "ablation.md").write_text(report)
    print(f"wrote {args.sweep_dir / 'ablation.md'} and {args.sweep_dir / 'ablation.png'}")
    return 1 if flags else 0


if __name__ == "__main__":
    sys.exit(main())
