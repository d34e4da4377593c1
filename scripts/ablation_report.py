"""Report of a backend ablation sweep: python scripts/ablation_report.py SWEEP_DIR

Reads each run's metrics.json and resolved config (.hydra/config.yaml), prints a Markdown table
(backend, compile, median step time, samples/s, peak memory, validation Dice, speed-up over
python eager) and writes ablation.md and ablation.png into SWEEP_DIR. A run without
metrics.json is reported as failed; a run whose Dice differs from the python eager run's by
more than --dice-tolerance is flagged. Exits 1 when anything is flagged or failed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--dice-tolerance", type=float, default=0.02)
    args = parser.parse_args(argv)
    if not args.sweep_dir.is_dir():
        parser.error(f"{args.sweep_dir} is not a folder; pass the sweep folder (multirun/<task>/<time>)")
    runs = load_runs(args.sweep_dir)
    if not runs:
        parser.error(f"{args.sweep_dir} holds no runs (no */.hydra/config.yaml)")
    markdown, flags = table(runs, baseline_of(runs), args.dice_tolerance)
    report = markdown + ("\n\n" + "\n".join(f"- FLAG: {f}" for f in flags) if flags else "") + "\n"
    print(report)
    (args.sweep_dir / "ablation.md").write_text(report)
    if any(r.metrics for r in runs):
        plot(runs, args.sweep_dir / "ablation.png")
    print(f"wrote {args.sweep_dir / 'ablation.md'} and {args.sweep_dir / 'ablation.png'}")
    return 1 if flags else 0


if __name__ == "__main__":
    sys.exit(main())
