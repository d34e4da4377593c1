"""segnet and nnU-Net v2 side by side, at the same training time, on the same fold:

    python scripts/peer_nnunet.py DATASET --budget-seconds S [--fold F] [--configuration 2d|3d_fullres]
                                  [--output DIR] [--seed N] [--calibration-steps K]

DATASET is a Decathlon (MSD) folder or an nnU-Net v2 raw folder. Needs the `peer` extra
(`pip install -e ".[peer]"`: nnunetv2); segnet itself never imports nnU-Net.

Both tools are treated alike:
1. The same cases: nnU-Net's raw layout is made by its own MSD converter (a Decathlon folder,
   staged under DIR with the name and the empty imagesTs the converter wants, every labelled case
   a training case), or the nnU-Net folder is linked as it is; its splits_final.json is segnet's
   split of the dataset (the split the dataset states, in its splits_final.json or dataset.json's
   validation list, else the same 5-fold KFold, seed 12345), so both train and validate on the
   same cases.
2. The same training time, loading and augmentation included: each tool first trains 2K steps
   and times the last K end to end (nnU-Net two epochs of K, the second timed, its validation
   iterations in it; segnet from one step's end to the next, the wait for data and device
   augmentation in it); nnU-Net then gets epochs x iterations (250 per epoch, a fifth of that in
   validation iterations, as its defaults) and segnet trainer.max_steps, sized to S seconds each.
   The table gives the seconds and steps each actually trained.
3. The same kind of weights and the same test-time augmentation: each tool predicts the
   validation cases with its final weights (nnU-Net's perform_actual_validation, segnet-evaluate
   with the run's final.ckpt), both mirrored over every combination of the spatial axes, as
   nnU-Net validates; neither postprocesses.
4. One evaluator: segnet.evaluation.evaluator.score_case scores every prediction against its
   label file (Dice, HD95, NSD), and segnet's paired statistics compare the tools per case:
   segnet minus nnU-Net, the bootstrap interval, Wilcoxon's p, the verdict.

A third row trains nnU-Net with segnet's patch and batch (nnU-Net's own network topology for
that patch, set through another nnU-Net plans file, nnUNetPlans_segnetpatch), so the table shows
how much of a gap is the plan and how much the recipe.

Writes into DIR: peer.md (the table, also printed), peer.json (every number, the step times,
seconds and steps of each), peer.png (the per-case differences), the nnU-Net folders, and
segnet's run and evaluation folders.
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

from segnet.command_runs import folder_training, run_command
from segnet.data.dataset_json import describe_dataset
from segnet.data.formats import is_natural

ITERATIONS_PER_EPOCH = 250  # nnU-Net's; fewer when the budget affords less than one such epoch
VALIDATION_SHARE = 5  # nnU-Net validates 50 iterations per 250
DATASET_ID = 900
FOLDS, SPLIT_SEED = 5, 12345  # conf/data/folder.yaml's num_folds and split_seed
METRICS = ("Dice", "HD95", "NSD")
CONFIGURATIONS = {"2d": 2, "3d_fullres": 3}
PLAN_MATCHED = "nnUNetPlans_segnetpatch"  # nnU-Net's plans with segnet's patch and batch
TOOLS = {"nnunet": "nnU-Net", PLAN_MATCHED: "nnU-Net, segnet's patch and batch", "segnet": "segnet"}
COMPARED = ("same cases; the same training seconds each, loading and augmentation included; final weights; "
            "test-time mirroring over every combination of the spatial axes on both sides; no postprocessing; "
            "one evaluator (segnet's score_case)")


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


def require_nnunet() -> None:
    """Stops with the one line that says how to install the peer, before anything runs without it."""
    if importlib.util.find_spec("nnunetv2") is None:
        raise SystemExit('nnU-Net v2 is not installed: pip install -e ".[peer]" (or pip install nnunetv2)')


def point_nnunet_at(output: Path) -> None:
    """nnU-Net's three folders under output; read by nnunetv2 when it first needs them."""
    for variable in ("nnUNet_raw", "nnUNet_preprocessed", "nnUNet_results"):
        os.environ[variable] = str(output / variable)
        (output / variable).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("nnUNet_n_proc_DA", "2")  # segnet's data.num_workers
    # nnU-Net's validation exports through a pool of 8 spawned processes, each importing torch and
    # nnunetv2 anew; more than one per core only adds start-up. Not part of the timed training.
    os.environ.setdefault("nnUNet_def_n_proc", str(min(8, os.cpu_count() or 1)))


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
    # every labelled case is nnU-Net's training case (its converter takes all of imagesTr); a
    # validation list the dataset states is segnet's split, which splits_final.json gives nnU-Net
    labelled = len(describe_dataset(str(dataset)).labelled)
    stated = {key: value for key, value in spec.items() if key != "validation"}
    (staged / "dataset.json").write_text(json.dumps({"test": [], **stated, "numTraining": labelled}))
    convert_msd_dataset(str(staged), overwrite_target_id=DATASET_ID, num_processes=1)
    return target


def segnet_split(dataset: Path) -> list[dict[str, list[str]]]:
    """The folds segnet trains on the dataset: the split it states, else data.num_folds of data.split_seed."""
    from segnet.data.splits import dataset_splits

    return dataset_splits(describe_dataset(str(dataset)), FOLDS, SPLIT_SEED)[0]


def nnunet_prepare(name: str, configuration: str, splits: list[dict[str, list[str]]]) -> None:
    """Fingerprint, plan and preprocess with nnU-Net's own tools, and segnet's folds for its trainer."""
    from nnunetv2.experiment_planning.plan_and_preprocess_api import extract_fingerprints, plan_experiments, preprocess

    extract_fingerprints([DATASET_ID], num_processes=1, check_dataset_integrity=True, verbose=False)
    plan_experiments([DATASET_ID])
    preprocess([DATASET_ID], configurations=(configuration,), num_processes=(2,), verbose=False)
    folder = Path(os.environ["nnUNet_preprocessed"]) / name
    (folder / "splits_final.json").write_text(json.dumps([{"train": s["train"], "val": s["val"]} for s in splits]))


def plan_matched(name: str, configuration: str, patch: list[int], batch: int) -> list[int]:
    """nnU-Net's plans with segnet's patch and batch, as nnU-Net would build the configuration for
    that patch (its network topology, which may round the patch up to what its poolings divide),
    written as another plans file beside nnUNetPlans.json; the patch it trains."""
    from nnunetv2.experiment_planning.experiment_planners.default_experiment_planner import ExperimentPlanner
    from nnunetv2.experiment_planning.experiment_planners.network_topology import get_pool_and_conv_props

    folder = Path(os.environ["nnUNet_preprocessed"]) / name
    plans = json.loads((folder / "nnUNetPlans.json").read_text())
    planned = plans["configurations"][configuration]
    planner = ExperimentPlanner(name)  # its topology settings
    _, strides, kernels, patch, _ = get_pool_and_conv_props(planned["spacing"], patch,
                                                            planner.UNet_featuremap_min_edge_length, 999999)
    stages, widest = len(strides), planner.UNet_max_features_2d if len(patch) == 2 else planner.UNet_max_features_3d
    planned["architecture"]["arch_kwargs"].update(
        n_stages=stages, strides=strides, kernel_sizes=kernels,
        features_per_stage=[min(widest, planner.UNet_base_num_features * 2**i) for i in range(stages)],
        n_conv_per_stage=list(planner.UNet_blocks_per_stage_encoder[:stages]),
        n_conv_per_stage_decoder=list(planner.UNet_blocks_per_stage_decoder[: stages - 1]))
    planned.update(patch_size=[int(n) for n in patch], batch_size=int(batch))  # same data_identifier: same arrays
    plans["plans_name"] = PLAN_MATCHED
    (folder / f"{PLAN_MATCHED}.json").write_text(json.dumps(plans, indent=2))
    return planned["patch_size"]


def in_nnunet_axes(name: str, configuration: str, patch: list[int], natural: bool = False) -> list[int]:
    """segnet's patch (its axes: the image's voxel axes, a 2D patch the first two, sliced along the
    last) in nnU-Net's axes: SimpleITK's reversed order (a natural image: (1, rows, columns) there,
    (rows, columns, 1) here), then the plans' transpose_forward (a 2D configuration slices along
    its first axis). A 2D pair that slices along other axes cannot be matched, and is refused."""
    plans = json.loads((Path(os.environ["nnUNet_preprocessed"]) / name / "nnUNetPlans.json").read_text())
    read_as = [2, 0, 1] if natural else [2, 1, 0]  # nnU-Net's reader's axis i is segnet's read_as[i]
    file_axis = [read_as[axis] for axis in plans["transpose_forward"]]  # nnU-Net's axis i is segnet's file_axis[i]
    if configuration == "3d_fullres":
        return [patch[axis] for axis in file_axis]
    if file_axis[0] != 2:
        raise SystemExit(f"nnU-Net's 2d configuration slices along the images' axis {file_axis[0]}, segnet's along "
                         "axis 2: their patches cannot be matched; run with --configuration 3d_fullres")
    return [patch[axis] for axis in file_axis[1:]]


def nnunet_trainer(name: str, configuration: str, fold: int, device, iterations: int, epochs: int,
                   plans: str = "nnUNetPlans"):
    """nnU-Net's default trainer, as nnUNetv2_train makes it, for `epochs` x `iterations`."""
    from nnunetv2.run.run_training import get_trainer_from_args

    trainer = get_trainer_from_args(name, configuration, fold, plans_identifier=plans, device=device)
    trainer.num_iterations_per_epoch = iterations
    trainer.num_val_iterations_per_epoch = max(1, iterations // VALIDATION_SHARE)
    trainer.num_epochs = epochs
    return trainer


def nnunet_run(name: str, configuration: str, fold: int, budget: float, calibration: int,
               plans: str = "nnUNetPlans") -> dict[str, Any]:
    """Trains the fold for the budget and predicts its validation cases (final weights, mirrored)."""
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # Two epochs, the second one timed: the first also starts the data workers and warms up, which
    # per step of a short calibration would count several times over (segnet's probe skips its
    # first K steps for the same reason).
    probe = nnunet_trainer(name, configuration, fold, device, calibration, 2, plans)
    probe.run_training()
    seconds = probe.logger.get_value("epoch_end_timestamps", step=-1) - probe.logger.get_value(
        "epoch_start_timestamps", step=-1)
    step = seconds / calibration  # a training iteration, its loading and its share of validation iterations
    shutil.rmtree(probe.output_folder)
    steps = max(1, math.floor(budget / step))
    epochs = max(1, round(steps / ITERATIONS_PER_EPOCH))
    trainer = nnunet_trainer(name, configuration, fold, device, max(1, steps // epochs), epochs, plans)
    start = time.perf_counter()
    trainer.run_training()
    train_seconds = time.perf_counter() - start
    trainer.perform_actual_validation(save_probabilities=False)  # checkpoint_final's weights, mirrored
    trained = trainer.configuration_manager
    return {"step_seconds": step, "steps": epochs * trainer.num_iterations_per_epoch, "epochs": epochs,
            "iterations_per_epoch": trainer.num_iterations_per_epoch, "train_seconds": train_seconds,
            "patch_size": list(trained.patch_size), "batch_size": trained.batch_size,
            "predictions": str(Path(trainer.output_folder) / "validation")}


def segnet_run(dataset: Path, output: Path, dims: int, fold: int, seed: int, budget: float,
               calibration: int) -> dict[str, Any]:
    """segnet's defaults on the fold for the budget, then segnet-evaluate on its validation cases
    with the run's final weights, mirrored."""
    import torch

    common = folder_training(dataset, dims, fold, seed)
    probe = output / "segnet_probe"
    run_command("segnet-train", [*common, f"trainer.max_steps={2 * calibration}",
                                 f"callbacks.step_timer.skip={calibration}"], probe)
    step = json.loads((probe / "metrics.json").read_text())["step_wall_ms_mean"] / 1000
    shutil.rmtree(probe)
    steps = max(1, math.floor(budget / step))
    run, evaluation = output / "segnet_run", output / "segnet_evaluation"
    run_command("segnet-train", [*common, f"trainer.max_steps={steps}"], run)
    metrics = json.loads((run / "metrics.json").read_text())
    run_command("segnet-evaluate", [f"ckpt_path={metrics['checkpoints']['final']}", f"data.root={dataset}",
                                    "tta=true", "postprocessing=none"], evaluation)
    data = torch.load(metrics["checkpoints"]["final"], map_location="cpu", weights_only=True, mmap=True)[
        "hyper_parameters"]["data"]
    return {"step_seconds": step, "steps": metrics["global_step"], "train_seconds": metrics["fit_seconds"],
            "patch_size": list(data["patch_size"]), "batch_size": data["batch_size"] * data["samples_per_volume"],
            "predictions": str(evaluation / "predictions")}


def scores(predictions: Path, dataset: Path, cases: list[str], tool: str, fold: int) -> list[dict[str, Any]]:
    """Rows of segnet's statistics (variant, fold, seed, case, class, metric, value) for one tool."""
    from segnet.data.image_files import label_ending, read_label
    from segnet.evaluation.evaluator import score_case

    description = describe_dataset(str(dataset))
    labelled = {case.name: case for case in description.labelled}
    rows = []
    for case in cases:
        # segnet writes a label map as its image's format does; nnU-Net in the dataset's file ending
        written = [predictions / f"{case}{ending}" for ending in (label_ending(labelled[case].images[0]),
                                                                  label_ending(labelled[case].label))]
        file = next((path for path in written if path.is_file()), None)
        if file is None:
            raise SystemExit(f"{tool} wrote no prediction for validation case {case} ({written[0]})")
        prediction, _ = read_label(file)
        for c, metrics in score_case(prediction, labelled[case].label, list(description.class_names),
                                     ignore_label=description.ignore_label, regions=description.regions).items():
            rows += [{"variant": tool, "fold": fold, "seed": 0, "case": case, "class": c, "metric": m,
                      "value": metrics[m]} for m in METRICS]
    return rows


def report(rows: list[dict[str, Any]], runs: dict[str, Any], output: Path) -> str:
    """The table: segnet against each nnU-Net row per case, and what each tool trained."""
    from segnet.evaluation.statistics import compare

    lines = [f"# segnet vs nnU-Net v2: {runs['dataset']}, fold {runs['fold']}, {runs['configuration']}, "
             f"{runs['budget_seconds']:g} s of training each", "", f"Compared: {COMPARED}.", "",
             "| metric | baseline | baseline's | segnet's | segnet - baseline (per case) | 95 % interval | Wilcoxon p "
             "| verdict |", "|---|---|---|---|---|---|---|---|"]
    comparisons: dict[str, dict[str, Any]] = {}
    for baseline in ("nnunet", PLAN_MATCHED):
        pair = [r for r in rows if r["variant"] in (baseline, "segnet")]
        for metric in METRICS:
            (row,) = compare(pair, baseline, metric)
            comparisons.setdefault(baseline, {})[metric] = row
            lines.append(f"| {metric} | {TOOLS[baseline]} | {row['baseline_mean']:.4f} | {row['variant_mean']:.4f} | "
                         f"{row['mean_difference']:+.4f} | [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}] | "
                         f"{row['p_wilcoxon']:.3g} | {row['verdict']} |")
    rule = "; ".join(f"{m}: {comparisons['nnunet'][m]['absent_class']}" for m in METRICS)
    lines += ["", f"Per case, {rule}.", "", "| | patch | crops per step | step (s), calibrated | trained (s) | steps |",
              "|---|---|---|---|---|---|"]
    for tool, name in TOOLS.items():
        run = runs[tool]
        lines.append(f"| {name} | {' x '.join(map(str, run['patch_size']))} | {run['batch_size']} | "
                     f"{run['step_seconds']:.3f} | {run['train_seconds']:.0f} | {run['steps']} |")
    text = "\n".join(lines) + "\n"
    (output / "peer.md").write_text(text)
    (output / "peer.json").write_text(json.dumps({**runs, "compared": COMPARED, "comparison": comparisons,
                                                  "scores": rows}, indent=2))
    plot(rows, comparisons["nnunet"], output / "peer.png")
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
    require_nnunet()
    args.output.mkdir(parents=True, exist_ok=True)
    point_nnunet_at(args.output)
    dataset = args.dataset.resolve()
    splits = segnet_split(dataset)
    if not 0 <= args.fold < len(splits):
        raise SystemExit(f"--fold {args.fold}: the dataset's split has {len(splits)} fold(s); "
                         f"use 0 to {len(splits) - 1}")
    name = nnunet_raw(dataset, args.output)
    nnunet_prepare(name, args.configuration, splits)
    nnunet = nnunet_run(name, args.configuration, args.fold, args.budget_seconds, args.calibration_steps)
    ours = segnet_run(dataset, args.output, CONFIGURATIONS[args.configuration], args.fold, args.seed,
                      args.budget_seconds, args.calibration_steps)
    natural = is_natural(describe_dataset(str(dataset)).training[0].images[0])
    plan_matched(name, args.configuration, in_nnunet_axes(name, args.configuration, ours["patch_size"], natural),
                 ours["batch_size"])
    matched = nnunet_run(name, args.configuration, args.fold, args.budget_seconds, args.calibration_steps,
                         PLAN_MATCHED)
    cases = splits[args.fold]["val"]
    predictions = {"nnunet": nnunet, PLAN_MATCHED: matched, "segnet": ours}
    rows = [row for tool, run in predictions.items()
            for row in scores(Path(run["predictions"]), dataset, cases, tool, args.fold)]
    runs = {"dataset": str(dataset), "fold": args.fold, "configuration": args.configuration,
            "budget_seconds": args.budget_seconds, "cases": cases, **predictions}
    print(report(rows, runs, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
