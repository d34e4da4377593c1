"""segnet and nnU-Net v2 side by side, at the same training time, on the same fold:

    python scripts/peer_nnunet.py DATASET --budget-seconds S [--fold F] [--configuration 2d|3d_fullres]
                                  [--output DIR] [--seed N] [--calibration-steps K]

DATASET is a Decathlon (MSD) folder or an nnU-Net v2 raw folder. Needs the `peer` extra
(`pip install -e ".[peer]"`: nnunetv2); segnet itself never imports nnU-Net.

1. nnU-Net's raw layout: its own MSD converter (a Decathlon folder, staged under DIR with the
   name and the empty imagesTs the converter wants), or the nnU-Net folder linked as it is.
2. nnU-Net plans and preprocesses with its own fingerprint extractor, planner and preprocessor;
   its splits_final.json is segnet's split of the dataset (the same 5-fold KFold, seed 12345), so
   both validate on the same cases.
3. The budget: each tool first trains K steps to measure its step time on this device (nnU-Net
   two epochs of K, the second timed; segnet the median step after the first); nnU-Net
   then gets epochs x iterations (250 per epoch, a fifth of that in validation iterations, as
   its defaults) and segnet trainer.max_steps, sized to S seconds each.
4. nnU-Net's trainer trains the fold and its own predictor predicts the validation cases
   (perform_actual_validation, the final weights); segnet trains its defaults
   (data=folder, every other setting as shipped) and segnet-evaluate predicts the same cases.
5. One evaluator scores both (segnet.evaluation.evaluator.score_case: Dice, HD95, NSD, each
   prediction against its label file) and segnet's paired statistics compare them per case:
   segnet minus nnU-Net, the bootstrap interval, Wilcoxon's p, the verdict.

Writes into DIR: peer.md (the table, also printed), peer.json (every number, the step times and
training seconds of both: nnU-Net's run_training, segnet's fit), peer.png (the per-case
differences), the nnU-Net folders, and segnet's run and evaluation folders.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from segnet_runs import ROOT, folder_training, segnet_command

ITERATIONS_PER_EPOCH = 250  # nnU-Net's; fewer when the budget affords less than one such epoch
VALIDATION_SHARE = 5  # nnU-Net validates 50 iterations per 250
DATASET_ID = 900
FOLDS, SPLIT_SEED = 5, 12345  # conf/data/folder.yaml's num_folds and split_seed
METRICS = ("Dice", "HD95", "NSD")
CONFIGURATIONS = {"2d": 2, "3d_fullres": 3}


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="a Decathlon or nnU-Net v2 raw dataset folder")
    parser.add_argument("--budget-seconds", type=float, required=True, help="training time of each tool")
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--configuration", choices=sorted(CONFIGURATIONS), default="2d")
    parser.add_argument("--output", type=Path, default=None, help="default: peer_<dataset folder name>")
    parser.add_argument("--seed", type=int, default=0, help="segnet's training seed")
    parser.add_argument("--calibration-steps", type=int, default=5, help="steps each tool trains to time a step")
    args = parser.parse_args(argv)
    if args.budget_seconds <= 0 or args.calibration_steps < 1:
        parser.error("--budget-seconds and --calibration-steps must be positive")
    if not (args.dataset / "dataset.json").is_file():
        parser.error(f"{args.dataset} has no dataset.json: give a Decathlon or nnU-Net v2 raw dataset folder")
    args.output = (args.output or Path(f"peer_{args.dataset.name}")).resolve()
    return args


def point_nnunet_at(output: Path) -> None:
    """nnU-Net's three folders under output; read by nnunetv2 when it first needs them."""
    for variable in ("nnUNet_raw", "nnUNet_preprocessed", "nnUNet_results"):
        os.environ[variable] = str(output / variable)
        (output / variable).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("nnUNet_n_proc_DA", "2")  # segnet's data.num_workers


def nnunet_raw(dataset: Path, output: Path) -> str:
    """The dataset in nnUNet_raw; its nnU-Net name."""
    from nnunetv2.dataset_conversion.convert_MSD_dataset import convert_msd_dataset

    spec = json.loads((dataset / "dataset.json").read_text())
    name = "".join(ch for ch in (spec.get("name") or dataset.name) if ch.isalnum()) or "Dataset"
    target = f"Dataset{DATASET_ID:03d}_{name}"
    raw = Path(os.environ["nnUNet_raw"]) / target
    if raw.exists():
        return target
    if "channel_names" in spec:  # already nnU-Net's layout
        raw.symlink_to(dataset.resolve(), target_is_directory=True)
        return target
    staged = output / "msd" / f"Task{DATASET_ID % 100:02d}_{name}"  # the converter splits Task<ID>_<Name>
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    for folder in ("imagesTr", "labelsTr"):
        (staged / folder).symlink_to((dataset / folder).resolve(), target_is_directory=True)
    (staged / "imagesTs").mkdir()
    (staged / "dataset.json").write_text(json.dumps({"test": [], **spec}))
    convert_msd_dataset(str(staged), overwrite_target_id=DATASET_ID, num_processes=1)
    return target


def segnet_split(dataset: Path) -> list[dict[str, list[str]]]:
    """segnet's five folds of the dataset (as training makes them: data.num_folds, data.split_seed)."""
    from segnet.data.dataset_json import describe_dataset
    from segnet.data.splits import choose_split

    description = describe_dataset(str(dataset))
    return [choose_split(description, fold, FOLDS, SPLIT_SEED).to_json() for fold in range(FOLDS)]


def nnunet_prepare(name: str, configuration: str, splits: list[dict[str, list[str]]]) -> None:
    """Fingerprint, plan and preprocess with nnU-Net's own tools, and segnet's folds for its trainer."""
    from nnunetv2.experiment_planning.plan_and_preprocess_api import extract_fingerprints, plan_experiments, preprocess

    extract_fingerprints([DATASET_ID], num_processes=1, check_dataset_integrity=True, verbose=False)
    plan_experiments([DATASET_ID])
    preprocess([DATASET_ID], configurations=(configuration,), num_processes=(2,), verbose=False)
    folder = Path(os.environ["nnUNet_preprocessed"]) / name
    (folder / "splits_final.json").write_text(json.dumps([{"train": s["train"], "val": s["val"]} for s in splits]))


def nnunet_trainer(name: str, configuration: str, fold: int, device, iterations: int, epochs: int):
    """nnU-Net's default trainer, as nnUNetv2_train makes it, for `epochs` x `iterations`."""
    from nnunetv2.run.run_training import get_trainer_from_args

    trainer = get_trainer_from_args(name, configuration, fold, device=device)
    trainer.num_iterations_per_epoch = iterations
    trainer.num_val_iterations_per_epoch = max(1, iterations // VALIDATION_SHARE)
    trainer.num_epochs = epochs
    return trainer


def nnunet_run(name: str, configuration: str, fold: int, budget: float, calibration: int) -> dict[str, Any]:
    """Trains the fold for the budget and predicts its validation cases; the folder of predictions."""
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # Two epochs, the second one timed: the first also starts the data workers and warms up, which
    # per step of a short calibration would count several times over (segnet's probe skips its
    # first step for the same reason).
    probe = nnunet_trainer(name, configuration, fold, device, calibration, 2)
    probe.run_training()
    seconds = probe.logger.get_value("epoch_end_timestamps", step=-1) - probe.logger.get_value(
        "epoch_start_timestamps", step=-1)
    step = seconds / calibration  # a training iteration and its share of validation iterations
    shutil.rmtree(probe.output_folder)
    steps = max(1, math.floor(budget / step))
    epochs = max(1, round(steps / ITERATIONS_PER_EPOCH))
    trainer = nnunet_trainer(name, configuration, fold, device, max(1, steps // epochs), epochs)
    start = time.perf_counter()
    trainer.run_training()
    train_seconds = time.perf_counter() - start
    trainer.perform_actual_validation(save_probabilities=False)
    return {"step_seconds": step, "epochs": epochs, "iterations_per_epoch": trainer.num_iterations_per_epoch,
            "train_seconds": train_seconds, "predictions": str(Path(trainer.output_folder) / "validation")}


def segnet_run(dataset: Path, output: Path, dims: int, fold: int, seed: int, budget: float,
               calibration: int) -> dict[str, Any]:
    """segnet's defaults on the fold for the budget, then segnet-evaluate on its validation cases."""
    common = folder_training(dataset, dims, fold, seed)
    probe = output / "segnet_probe"
    segnet_command(["train.py"], [*common, f"trainer.max_steps={calibration}", "callbacks.step_timer.skip=1"], probe)
    step = json.loads((probe / "metrics.json").read_text())["step_time_ms_median"] / 1000
    shutil.rmtree(probe)
    steps = max(1, math.floor(budget / step))
    run, evaluation = output / "segnet_run", output / "segnet_evaluation"
    segnet_command(["train.py"], [*common, f"trainer.max_steps={steps}"], run)
    metrics = json.loads((run / "metrics.json").read_text())
    segnet_command(["scripts/evaluate.py"], [f"ckpt_path={metrics['checkpoints']['best']}", f"data.root={dataset}"],
                   evaluation)
    return {"step_seconds": step, "max_steps": steps, "fit_seconds": metrics["fit_seconds"],
            "predictions": str(evaluation / "predictions")}


def scores(predictions: Path, dataset: Path, cases: list[str], tool: str, fold: int) -> list[dict[str, Any]]:
    """Rows of segnet's statistics (variant, fold, seed, case, class, metric, value) for one tool."""
    import nibabel as nib
    import numpy as np

    from segnet.data.dataset_json import describe_dataset
    from segnet.evaluation.evaluator import score_case

    description = describe_dataset(str(dataset))
    labels = {case.name: case.label for case in description.labelled}
    rows = []
    for case in cases:
        file = predictions / f"{case}.nii.gz"
        if not file.is_file():
            raise SystemExit(f"{tool} wrote no prediction for validation case {case} ({file})")
        prediction = np.asarray(nib.load(str(file)).dataobj).astype(np.int64)
        for c, metrics in score_case(prediction, labels[case], list(description.class_names),
                                     ignore_label=description.ignore_label).items():
            rows += [{"variant": tool, "fold": fold, "seed": 0, "case": case, "class": c, "metric": m,
                      "value": metrics[m]} for m in METRICS]
    return rows


def report(rows: list[dict[str, Any]], runs: dict[str, Any], output: Path) -> str:
    from segnet.evaluation.statistics import compare
    from segnet.metrics import nanmean

    means = {(r["variant"], r["metric"]): [] for r in rows}
    for r in rows:
        means[(r["variant"], r["metric"])].append(r["value"])
    lines = [f"# segnet vs nnU-Net v2: {runs['dataset']}, fold {runs['fold']}, {runs['configuration']}, "
             f"{runs['budget_seconds']:g} s of training each", "",
             "| metric | nnU-Net | segnet | segnet - nnU-Net (per case) | 95 % interval | Wilcoxon p | verdict |",
             "|---|---|---|---|---|---|---|"]
    comparisons = {}
    for metric in METRICS:
        (row,) = compare(rows, "nnunet", metric)
        comparisons[metric] = row
        peer, ours = (float(nanmean(means[(tool, metric)])) for tool in ("nnunet", "segnet"))
        lines.append(f"| {metric} | {peer:.4f} | {ours:.4f} | {row['mean_difference']:+.4f} | "
                     f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}] | {row['p_wilcoxon']:.3g} | {row['verdict']} |")
    lines += ["", "| | step (s) | training (s) | steps |", "|---|---|---|---|",
              f"| nnU-Net | {runs['nnunet']['step_seconds']:.3f} | {runs['nnunet']['train_seconds']:.0f} | "
              f"{runs['nnunet']['epochs']} x {runs['nnunet']['iterations_per_epoch']} |",
              f"| segnet | {runs['segnet']['step_seconds']:.3f} | {runs['segnet']['fit_seconds']:.0f} | "
              f"{runs['segnet']['max_steps']} |"]
    text = "\n".join(lines) + "\n"
    (output / "peer.md").write_text(text)
    (output / "peer.json").write_text(json.dumps({**runs, "comparison": comparisons, "scores": rows}, indent=2))
    plot(rows, comparisons, output / "peer.png")
    return text


def plot(rows: list[dict[str, Any]], comparisons: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from segnet.evaluation.statistics import paired_differences

    figure, axes = plt.subplots(1, len(METRICS), figsize=(4 * len(METRICS), 3.2))
    for axis, metric in zip(axes, METRICS, strict=True):
        per_case = list(paired_differences(rows, "nnunet", metric)["segnet"].values())
        axis.scatter(per_case, range(len(per_case)), s=12, alpha=0.7)
        row = comparisons[metric]
        axis.axvline(0, color="grey", lw=0.8)
        axis.errorbar([row["mean_difference"]], [-1], xerr=[[row["mean_difference"] - row["ci_low"]],
                                                            [row["ci_high"] - row["mean_difference"]]], fmt="o",
                      color="black", capsize=3)
        axis.set_title(f"{metric}: segnet - nnU-Net per case")
        axis.set_yticks([])
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if importlib.util.find_spec("nnunetv2") is None:
        raise SystemExit('nnU-Net v2 is not installed: pip install -e ".[peer]" (or pip install nnunetv2)')
    args.output.mkdir(parents=True, exist_ok=True)
    point_nnunet_at(args.output)
    dataset = args.dataset.resolve()
    if not 0 <= args.fold < FOLDS:
        raise SystemExit(f"--fold {args.fold}: use 0 to {FOLDS - 1}")
    splits = segnet_split(dataset)
    name = nnunet_raw(dataset, args.output)
    nnunet_prepare(name, args.configuration, splits)
    nnunet = nnunet_run(name, args.configuration, args.fold, args.budget_seconds, args.calibration_steps)
    ours = segnet_run(dataset, args.output, CONFIGURATIONS[args.configuration], args.fold, args.seed,
                      args.budget_seconds, args.calibration_steps)
    cases = splits[args.fold]["val"]
    rows = (scores(Path(nnunet["predictions"]), dataset, cases, "nnunet", args.fold)
            + scores(Path(ours["predictions"]), dataset, cases, "segnet", args.fold))
    runs = {"dataset": str(dataset), "fold": args.fold, "configuration": args.configuration,
            "budget_seconds": args.budget_seconds, "cases": cases, "nnunet": nnunet, "segnet": ours}
    print(report(rows, runs, args.output))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
