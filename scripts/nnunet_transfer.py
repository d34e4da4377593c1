"""Does starting from a model nnU-Net trained help on a related task with few cases, and do edge
layers inserted into its network help there?

    python scripts/nnunet_transfer.py OUTPUT [--source-cases N] [--target-cases N] [--train-cases N]
                                      [--source-iterations N] [--steps N] [--folds N]

Needs the `peer` extra (`pip install -e ".[peer]"`). Everything is generated (segnet.generated.blobs):
1. The source task: --source-cases blob cases at high contrast. nnU-Net v2 trains it itself
   (its fingerprint, plan, preprocessing and default trainer, --source-iterations iterations of
   fold 0, a small network: 8 features at the top), as scripts/peer_nnunet.py runs nnU-Net.
2. The target task: --target-cases cases of the same anatomy at a lower contrast (the blobs stand
   out from the noise by a third of the source's), split by its splits_final.json into --folds
   folds, each training on --train-cases cases and validating on the rest.
3. Per fold, four segnet runs of nnU-Net's network, --steps steps each, all else the same (the
   source's plan carried, deep supervision, data order seed 0): fine-tuned from the source's fold 0
   (model.init_from) or from scratch (the same network from nnU-Net's own initialization, seeded by
   the fold, written as a model folder of its own so that the runs differ in the weights alone),
   each with edge layers at alpha 0 (model.edge_placement=[input,skips]) and without ([]).
4. segnet-evaluate scores each run's final weights on the fold's validation cases, mirrored over
   every combination of the axes, no postprocessing; one evaluator (scripts/peer_nnunet.py's
   scores) scores the label maps, and segnet's paired statistics compare the variants per case
   (a case's score is its mean over the folds that validated it).

Writes OUTPUT/transfer.md (the tables, also printed) and transfer.json (every score). Run again
into the same OUTPUT, it reuses what finished (the source model, the target, each scored run), so
an interrupted run goes on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from peer_nnunet import (  # scripts/peer_nnunet.py: Python puts this script's folder first on its path
    DATASET_ID,
    METRICS,
    nnunet_prepare,
    nnunet_raw,
    nnunet_trainer,
    point_nnunet_at,
    require_nnunet,
    scores,
)

from segnet.command_runs import run_command
from segnet.generated.blobs import CONTRAST, write_blob_dataset
from segnet.nnunet.folder import FINAL

CONFIGURATION = "3d_fullres"
MODEL_FOLDER = f"nnUNetTrainer__nnUNetPlans__{CONFIGURATION}"  # nnU-Net's default trainer and plans
TARGET_CONTRAST = (CONTRAST[0] / 3, CONTRAST[1] / 3)
TARGET_SEED = 1000  # the target's cases are other draws than the source's
STARTS = {"fine-tuned": "the source's fold 0", "scratch": "nnU-Net's initialization"}
EDGES = {"edges": "[input,skips]", "none": "[]"}
COMPARISONS = (  # (variant, baseline): what each row asks
    ("fine-tuned, edges", "scratch, edges"),
    ("fine-tuned, none", "scratch, none"),
    ("fine-tuned, edges", "fine-tuned, none"),
    ("scratch, edges", "scratch, none"),
)
COMPARED = ("the same target cases and folds; nnU-Net's network and the source's plan in every run; the same "
            "steps, data order (seed 0), optimizer and loss; final weights; test-time mirroring over every "
            "combination of the axes; no postprocessing; one evaluator (segnet's score_case)")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--source-cases", type=int, default=20)
    parser.add_argument("--target-cases", type=int, default=16)
    parser.add_argument("--train-cases", type=int, default=4, help="target cases each fold trains on")
    parser.add_argument("--source-iterations", type=int, default=80, help="nnU-Net's iterations on the source")
    parser.add_argument("--steps", type=int, default=80, help="segnet's steps per target run")
    parser.add_argument("--folds", type=int, default=1)
    args = parser.parse_args(argv)
    if not 0 < args.train_cases < args.target_cases or args.folds * args.train_cases > args.target_cases:
        parser.error("--folds x --train-cases must fit in --target-cases, leaving cases to validate")
    return args


def train_source(output: Path, cases: int, iterations: int) -> Path:
    """nnU-Net's model of the source task (a small network), trained by nnU-Net; its fold 0 folder."""
    import torch

    trained = Path(os.environ["nnUNet_results"]) / f"Dataset{DATASET_ID}_source" / MODEL_FOLDER / "fold_0"
    if (trained / FINAL).is_file():
        return trained
    source = write_blob_dataset(output / "source", cases)
    name = nnunet_raw(source, output)
    splits = [{"train": [f"case{i}" for i in range(cases)], "val": ["case0"]}]  # every case trains fold 0
    nnunet_prepare(name, CONFIGURATION, splits)
    plans_file = Path(os.environ["nnUNet_preprocessed"]) / name / "nnUNetPlans.json"
    plans = json.loads(plans_file.read_text())
    arch = plans["configurations"][CONFIGURATION]["architecture"]["arch_kwargs"]
    arch["features_per_stage"] = [min(8 * 2**i, 32) for i in range(len(arch["features_per_stage"]))]
    plans_file.write_text(json.dumps(plans, indent=2))  # the network alone: the preprocessed arrays stay valid
    os.environ["nnUNet_n_proc_DA"] = "0"  # augmentation in this process: 2 cores leave no room for workers
    torch.manual_seed(0)
    trainer = nnunet_trainer(name, CONFIGURATION, 0, torch.device("cpu"), iterations, 1)
    trainer.initial_lr = 0.05  # as tests/helpers/nnunet_model.py: a few hundred iterations learn both blobs
    trainer.run_training()
    return Path(trainer.output_folder)


def scratch_model(source_fold: Path, folder: Path, seed: int) -> Path:
    """A model folder beside the source's with its dataset.json and plans.json and, as fold_0's
    checkpoint_final.pth, its network freshly initialized as nnU-Net initializes it (seeded): a
    fine-tuning from it is a training from scratch that differs from the fine-tuning in the
    weights alone. Its fold_0 folder."""
    import torch

    from segnet.nnunet.folder import FILES, ModelFolder
    from segnet.nnunet.plans import run_data
    from segnet.nnunet.run_model import nnunet_network

    source = ModelFolder.read(source_fold.parent)
    fold = folder / source.path.name / "fold_0"
    if (fold / FINAL).is_file():
        return fold
    fold.mkdir(parents=True)
    for name in FILES:
        shutil.copy(source.path / name, fold.parent / name)
    torch.manual_seed(seed)
    network = nnunet_network(source, run_data(source, 0)).network
    torch.save({"network_weights": network.state_dict()}, fold / FINAL)
    return fold


def target_splits(target: Path, folds: int, train_cases: int) -> list[dict[str, list[str]]]:
    """Fold k trains on cases k * train_cases onwards (train_cases of them) and validates on the rest,
    written as the target's splits_final.json."""
    names = sorted(path.name.removesuffix(".nii.gz") for path in (target / "labelsTr").glob("*.nii.gz"))
    splits = []
    for fold in range(folds):
        train = names[fold * train_cases:(fold + 1) * train_cases]
        splits.append({"train": train, "val": [name for name in names if name not in train]})
    (target / "splits_final.json").write_text(json.dumps(splits, indent=2))
    return splits


def target_run(output: Path, target: Path, fold: int, start: Path, edges: str, steps: int) -> Path:
    """One segnet run on the target's fold from `start`, then segnet-evaluate of its final weights on
    the fold's validation cases; the folder of its label maps."""
    run, evaluation = output / "run", output / "evaluation"
    if (evaluation / "summary.json").is_file():  # scored before
        return evaluation / "predictions"
    shutil.rmtree(output, ignore_errors=True)  # an interrupted run starts again
    run_command("segnet-train", ["data=folder", f"data.root={target}", f"data.fold={fold}", "data.num_workers=0",
                                 "seed=0", f"model.init_from={start}", f"model.edge_placement={edges}",
                                 f"trainer.max_steps={steps}", f"data.steps_per_epoch={steps}",
                                 "trainer.max_epochs=1", "trainer.check_val_every_n_epoch=1", "logger=csv"], run)
    final = json.loads((run / "metrics.json").read_text())["checkpoints"]["final"]
    run_command("segnet-evaluate", [f"ckpt_path={final}", f"data.root={target}", f"data.fold={fold}",
                                    "data.split=validation", "tta=true", "postprocessing=none", "num_workers=0"],
                evaluation)
    return evaluation / "predictions"


def report(rows: list[dict[str, Any]], settings: dict[str, Any], output: Path) -> str:
    from segnet.evaluation.statistics import compare, mean_score

    variants = list(dict.fromkeys(row["variant"] for row in rows))
    lines = [f"# Fine-tuning nnU-Net's model vs training from scratch, with and without edge layers: "
             f"{settings['target_cases']} target cases, {settings['folds']} folds of {settings['train_cases']} "
             f"training cases, {settings['steps']} steps", "", f"Compared: {COMPARED}.", "",
             "| variant | " + " | ".join(f"mean {m}" for m in METRICS) + " |", "|---" * (1 + len(METRICS)) + "|"]
    for variant in variants:
        lines.append(f"| {variant} | " + " | ".join(f"{mean_score(rows, variant, m):.4f}" for m in METRICS) + " |")
    lines += ["", "| variant | baseline | metric | cases | mean paired Δ | 95 % interval | Wilcoxon p | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    comparisons = []
    for variant, baseline in COMPARISONS:
        pair = [row for row in rows if row["variant"] in (variant, baseline)]
        for metric in METRICS:
            (row,) = compare(pair, baseline, metric)
            comparisons.append({"baseline": baseline, "metric": metric, **row})
            lines.append(f"| {variant} | {baseline} | {metric} | {row['n_cases']} | {row['mean_difference']:+.4f} | "
                         f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}] | {row['p_wilcoxon']:.3g} | "
                         f"{row['verdict']} |")
    rule = "; ".join(f"{c['metric']}: {c['absent_class']}" for c in comparisons[:len(METRICS)])
    lines += ["", f"Per case, {rule}. HD95 in mm, lower is better."]
    text = "\n".join(lines) + "\n"
    (output / "transfer.md").write_text(text)
    (output / "transfer.json").write_text(json.dumps({**settings, "compared": COMPARED, "comparisons": comparisons,
                                                      "scores": rows}, indent=2))
    return text


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    require_nnunet()
    output = args.output.resolve()
    output.mkdir(parents=True, exist_ok=True)
    # nnU-Net's planner sizes its estimate's threads by nnUNet_n_proc_DA: 1 until training
    os.environ.update(nnUNet_n_proc_DA="1", nnUNet_compile="false")
    point_nnunet_at(output)
    source_fold = train_source(output, args.source_cases, args.source_iterations)
    target = output / "target"
    if not (target / "dataset.json").is_file():
        write_blob_dataset(target, args.target_cases, TARGET_SEED, TARGET_CONTRAST)
    rows = []
    for fold, split in enumerate(target_splits(target, args.folds, args.train_cases)):
        starts = {"fine-tuned": source_fold, "scratch": scratch_model(source_fold, output / f"scratch_{fold}", fold)}
        for start, path in starts.items():
            for edges, placement in EDGES.items():
                variant = f"{start}, {edges}"
                print(f"fold {fold}: {variant}", flush=True)
                folder = output / f"fold_{fold}" / variant.replace(", ", "_")
                predictions = target_run(folder, target, fold, path, placement, args.steps)
                rows += scores(predictions, target, split["val"], variant, fold)
    print(report(rows, vars(args) | {"output": str(output)}, output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
