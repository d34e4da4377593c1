"""Did a change make segnet's models worse? python scripts/accuracy_check.py [--update] [--out DIR]

Trains the shipped defaults (data=folder, everything else as conf/ ships it) at a fixed short budget
on five generated datasets of different kinds (scripts/make_dataset.py: the hard 2D thin-structure
task, the 3D anisotropic phantom, the brain-like tissue task from one scanner and from a scanner per
case, differing in intensity scale, contrast, bias field and noise, and the heads, whose fields of
view run from 28 % to 98 % air and whose folds hold out bands of the head) over a few folds and seeds, scores
every validation case (the final weights' validation: Dice and surface Dice per case and class),
and compares them with the record of the last accepted run (docs/accuracy-record.json, summarized in
docs/results/accuracy-record.md) by the ablation statistics: per case, this run minus the record on the same
dataset, fold, seed, case and class, averaged over classes and seeds; the bootstrap interval over
cases and Wilcoxon's p (segnet.evaluation.statistics.compare). A class absent from a case and not
predicted scores 1 there, in the means and the differences alike, so a model that starts predicting
a structure in cases that lack it scores 0 beside the record's 1 and is found worse.

The verdict per dataset and metric is "better" or "worse" where the interval excludes zero and
the mean difference is larger than the record's seed spread (how much retraining with another seed
moves the mean score: a change that only sends training down another random path moves every case
of a run together, which the per-case interval alone would call significant); else "no
difference found", with the difference the check could have detected. The same code on the same
machine retrains the same models (seeded, deterministic on the CPU), so an unchanged tree gives
differences of zero.

Every change to data loading, augmentation, the model, the loss or the schedule runs it. Its steps
come to about 12 minutes on 2 CPU cores; start-up, planning and validation come on top.
--update makes this run the record (after a change the evidence accepts).
Exits 1 when any verdict is "worse", 2 when the record cannot be compared (other datasets or checks).
Writes into DIR: accuracy.md (the table, also printed), accuracy.json (every score), the runs.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from segnet.command_runs import folder_training, run_command

ROOT = Path(__file__).resolve().parents[1]  # the checkout: its record, its dataset generator, its commit
RECORD = ROOT / "docs" / "accuracy-record.json"
METRICS = {"Dice": "val_dice_per_case", "NSD": "val_nsd_per_case"}


@dataclass(frozen=True)
class Check:
    """One generated dataset and how the check trains on it."""

    kind: str  # scripts/make_dataset.py's
    cases: int
    dims: int
    steps: int
    folds: tuple[int, ...]
    seeds: tuple[int, ...]


CHECKS = (
    Check("hard", 40, 2, 200, (0,), (0, 1)),
    Check("brain", 40, 2, 200, (0,), (0, 1)),
    Check("scanners", 40, 2, 200, (0,), (0, 1)),  # the brain heads, each case from its own scanner
    Check("anisotropic", 25, 3, 60, (0, 1), (0, 1)),
    # heads as an archive holds them: fold 0 holds out the brain's top (scanned with wide fields of
    # view only), fold 1 the bottom; where a model that depends on the air around a scan fails
    Check("heads", 20, 2, 200, (0, 1), (0, 1)),
)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, default=RECORD, help="the last accepted run (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("accuracy_check"), help="datasets, runs and reports")
    parser.add_argument("--update", action="store_true", help="write this run as the record")
    return parser.parse_args(argv)


def make_dataset(check: Check, folder: Path) -> Path:
    """The check's dataset under folder (written once: the generators are deterministic)."""
    root = folder / check.kind
    if not (root / "dataset.json").is_file():
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_dataset.py"), check.kind, str(root),
                               "--cases", str(check.cases)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"make_dataset.py {check.kind} failed:\n{done.stderr[-3000:]}")
    return root


def content_hash(root: Path) -> str:
    """A hash of every case's voxels and grid, so that a record is only compared on the data it scored
    (the files' bytes would not do: gzip stamps them with the time they were written)."""
    import nibabel as nib
    import numpy as np

    digest = hashlib.sha256()
    for path in sorted([*root.glob("imagesTr/*.nii.gz"), *root.glob("labelsTr/*.nii.gz")]):
        image = nib.load(str(path))
        digest.update(path.name.encode())
        digest.update(np.ascontiguousarray(np.asarray(image.dataobj)).tobytes())
        digest.update(np.asarray(image.affine, np.float64).tobytes())
    return digest.hexdigest()


def train_and_score(check: Check, dataset: Path, runs: Path, fold: int, seed: int) -> tuple[list[dict], float]:
    """(the final weights' validation scores of one run as statistics rows, its median step in s)."""
    run = runs / f"{check.kind}_fold{fold}_seed{seed}"
    run_command("segnet-train", [*folder_training(dataset, check.dims, fold, seed),
                                 f"trainer.max_steps={check.steps}"], run)
    metrics = json.loads((run / "metrics.json").read_text())
    rows = [{"dataset": check.kind, "fold": fold, "seed": seed, "case": case, "class": name, "metric": metric,
             "value": value}
            for metric, key in METRICS.items() for case, per_class in metrics[key].items()
            for name, value in per_class.items()]
    return rows, metrics["step_time_ms_median"] / 1000


def seed_spread(rows: list[dict], metric: str) -> float:
    """The standard deviation over seeds of the mean score (NaN with one seed)."""
    from segnet.evaluation.statistics import seed_spread as spread

    return spread([{**row, "variant": "record"} for row in rows if row["metric"] == metric], "record", metric)


def compare_with_record(now: list[dict], record: list[dict], kind: str) -> list[dict[str, Any]]:
    """Per metric of one dataset: means, the paired comparison and the verdict (module docstring)."""
    from segnet.evaluation.statistics import compare

    table = []
    for metric in METRICS:
        ours = [r for r in now if r["dataset"] == kind and r["metric"] == metric]
        theirs = [r for r in record if r["dataset"] == kind and r["metric"] == metric]
        (row,) = compare([*({**r, "variant": "record"} for r in theirs), *({**r, "variant": "now"} for r in ours)],
                         "record", metric)
        spread = seed_spread(theirs, metric)
        verdict = row["verdict"]
        if verdict in ("better", "worse") and not math.isnan(spread) and abs(row["mean_difference"]) <= spread:
            verdict = f"no difference (within the record's seed spread, {verdict} by the interval alone)"
        table.append({"dataset": kind, "metric": metric, "record": row["baseline_mean"], "now": row["variant_mean"],
                      "seed_spread": spread,
                      **{k: row[k] for k in ("n_cases", "mean_difference", "ci_low", "ci_high", "p_wilcoxon")},
                      "verdict": verdict, "absent_class": row["absent_class"]})
    return table


def markdown(table: list[dict], record: dict, steps: dict[str, float]) -> str:
    lines = [f"# Accuracy check against the record of {record['date']} (commit {record['commit'][:10]})", "",
             "| dataset | metric | cases | record | now | now - record [95 % interval] | Wilcoxon p "
             "| record's seed spread | verdict | step (s) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        lines.append(f"| {row['dataset']} | {row['metric']} | {row['n_cases']} | {row['record']:.4f} | "
                     f"{row['now']:.4f} | {row['mean_difference']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]"
                     f" | {row['p_wilcoxon']:.3g} | {row['seed_spread']:.4f} | {row['verdict']} | "
                     f"{steps[row['dataset']]:.2f} |")
    rules = dict.fromkeys(f"{row['metric']}: {row['absent_class']}" for row in table)
    return "\n".join([*lines, "", f"Per case, {'; '.join(rules)}."]) + "\n"


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return (done.stdout.strip() or "unknown") + ("+changes" if dirty else "")


def environment() -> dict[str, Any]:
    """Where the runs trained: the same code trains other weights on another processor or with
    other library versions (their kernels round differently), so a record says where it was made."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), None) if Path("/proc/cpuinfo").is_file() else None
    packages = {name: importlib.metadata.version(name) for name in ("torch", "numpy", "scipy", "monai", "lightning")}
    return {"python": platform.python_version(), **packages, "cpu": cpu or platform.processor() or "unknown",
            "cores": os.cpu_count()}


def environment_note(record: dict[str, Any], now: dict[str, Any]) -> str:
    """A line under the table where the record was made elsewhere (or does not say where)."""
    if "environment" not in record:
        return "The record does not say where it was made: a difference may come from the machine or the libraries.\n"
    other = {key: (record["environment"].get(key), value) for key, value in now.items()
             if record["environment"].get(key) != value}
    if not other:
        return ""
    said = ", ".join(f"{key} {was} there, {value} here" for key, (was, value) in other.items())
    return f"The record was made elsewhere ({said}): a difference may come from there, not from the code.\n"


def _refuse(message: str) -> int:
    print(f"accuracy_check: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    record = json.loads(args.record.read_text()) if args.record.is_file() else None
    if record is None and not args.update:
        raise SystemExit(f"no record at {args.record}: run with --update to make one")
    checks = json.loads(json.dumps([asdict(check) for check in CHECKS]))  # as the record holds them
    if record is not None and record["checks"] != checks and not args.update:
        return _refuse(f"the record {args.record} ran other checks ({record['checks']}); this script runs {checks}. "
                       "Make a record of this tree's checks before the change (--update), then compare.")
    out = args.out.resolve()
    datasets = {check.kind: make_dataset(check, out / "datasets") for check in CHECKS}
    hashes = {kind: content_hash(root) for kind, root in datasets.items()}
    if record is not None and record["datasets"] != hashes and not args.update:
        changed = [kind for kind in hashes if record["datasets"].get(kind) != hashes[kind]]
        return _refuse(f"the generated datasets {', '.join(changed)} differ from the ones the record scored: "
                       "a generator changed; make a new record from the tree before the change (--update)")
    now, steps = [], {}
    for check in CHECKS:
        step_times = []
        for fold in check.folds:
            for seed in check.seeds:
                rows, step = train_and_score(check, datasets[check.kind], out / "runs", fold, seed)
                now += rows
                step_times.append(step)
        steps[check.kind] = sorted(step_times)[len(step_times) // 2]
    this_run = {"date": datetime.date.today().isoformat(), "commit": commit(), "environment": environment(),
                "checks": checks, "datasets": hashes, "step_seconds": steps, "scores": now}
    # --update over a record of other checks or datasets compares this run with itself: no pair to compare with
    comparable = record is not None and record["checks"] == checks and record["datasets"] == hashes
    baseline = record if comparable else this_run
    table = [row for check in CHECKS for row in compare_with_record(now, baseline["scores"], check.kind)]
    text = markdown(table, baseline, steps) + environment_note(baseline, this_run["environment"])
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "accuracy.md").write_text(text)
    (out / "accuracy.json").write_text(json.dumps({"comparison": table, **this_run}, indent=2))
    if args.update:
        args.record.write_text(json.dumps(this_run, indent=1) + "\n")
        print(f"wrote the record {args.record}")
    return 1 if any(row["verdict"] == "worse" for row in table) else 0


if __name__ == "__main__":
    sys.exit(main())
