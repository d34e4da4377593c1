"""Can segnet's probabilities be taken at their word, does the fitted temperature make them more
honest on cases it was not fitted on, and does the per-case uncertainty score find the predictions
to look at twice?

    python scripts/uncertainty_evidence.py OUTPUT [--cases N] [--test-cases N] [--steps N] [--splits regions|random]

Everything is generated: segnet.generated.heads, the T1 heads whose share of air, scanner gain,
gamma, bias field and noise vary per case, and whose splits_final.json holds one band of the head's
height out of each of its 5 folds (anatomy a fold has not seen).
1. --cases heads; per fold one 2D run of the shipped defaults, --steps steps (seed 0). The folds are
   the generator's (--splits regions: the validation heads show anatomy their fold never trained
   on, so the out-of-fold probabilities the temperature is fitted on are of unseen anatomy) or
   drawn at random (--splits random: validation heads like the training heads, as in most
   datasets).
2. segnet-find-best-configuration over the 5 runs: it predicts each fold's validation cases and
   fits the temperature on those out-of-fold probabilities.
3. Cross-validation: each fold's model predicts its validation cases as segnet-predict does by
   default (mirrored, no temperature, uncertainty=true): the per-case score against the case's Dice
   (Spearman's rank correlation; a useful score falls as the Dice rises).
4. Test: --test-cases heads of another seed (other heads, other scanners), seen by neither the
   training nor the temperature, predicted by each fold's model and by the 5 folds' ensemble with
   temperature 1 and with the fitted one (save_probabilities=true): ECE, Brier and NLL over the
   foreground classes, pooled over the cases, with a bootstrap interval over cases of the change.
5. Corrupted copies of the test heads (CORRUPTIONS), predicted by the ensemble as by default
   (no temperature) with uncertainty=true: how well the score separates each corruption's copies from
   the clean cases (AUROC; 0.5 is chance), how often a copy scores above its own clean case, and
   the Dice each corruption costs.

One evaluator (segnet's score_case) scores every label map. Writes OUTPUT/uncertainty.md (the
tables, also printed), uncertainty.json (every number) and three pictures
(uncertainty-reliability.png, uncertainty-score-vs-dice.png, uncertainty-corrupted.png). Run again
into the same OUTPUT, it reuses what finished.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from peer_nnunet import scores  # scripts/peer_nnunet.py: Python puts this script's folder first on its path
from scipy import ndimage, stats

from segnet.command_runs import folder_training, run_command
from segnet.evaluation.calibration import Calibration
from segnet.generated.heads import CLASS_NAMES, REGIONS, SPACING, heads_case, write_heads_dataset
from segnet.generated.phantom import affine_for, write_case, write_dataset_json
from segnet.inference.temperature import EPSILON
from segnet.inference.uncertainty import BAND

TEST_SEED = 1000  # the test heads are other draws (anatomy and scanner) than the training heads'
FOLDS = len(REGIONS)
BOOTSTRAP = 2000
DEFAULT_TEMPERATURE = 1  # the scores are of what segnet-predict gives by default: untempered
SPLITS = {"regions": "the generator's, each holding out one band of the head's height (unseen anatomy)",
          "random": "drawn at random, each fold's validation heads like its training heads"}
NOISE = 0.5  # the added noise's standard deviation, in units of the brain's intensity spread
BLUR = 2.0  # voxels in-plane: the blur's standard deviation
SCALE = 10.0  # every intensity times this
NEAR = 3  # voxels in-plane: how far from a structure (the reference's or the prediction's) a voxel is near it
SCORED = ("every voxel", f"within {NEAR} voxels of a structure")
IGNORED = 255  # the label value that leaves a voxel out of the calibration sums
KEPT = 0.6  # the cropped field of view keeps this share of the head's extent along the first axis
SCORES = {"score": "uncertainty.csv's score (uncertain voxels over uncertain or labelled ones)",
          "disagreement": "the members' mean mutual information over those voxels"}
COMPARED = ("every prediction mirrored over both in-plane axes as segnet-predict predicts, no postprocessing; "
            "the cross-validation by each fold's model on its validation cases, the test and corrupted cases by the "
            "5 folds' ensemble (and each fold's model for calibration); one evaluator (segnet's score_case)")


def noise(image: np.ndarray, label: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    spread = float(image[label > 0].std())
    return image + rng.normal(0.0, NOISE * spread, image.shape), label


def blur(image: np.ndarray, label: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return ndimage.gaussian_filter(image, (BLUR, BLUR, 0)), label


def scale(image: np.ndarray, label: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return image * SCALE, label


def cropped(image: np.ndarray, label: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The field of view cut through the head: KEPT of the labelled extent along the first axis,
    at a random place, kept (the image and the label alike)."""
    rows = np.flatnonzero(label.any((1, 2)))
    extent = rows[-1] + 1 - rows[0]
    start = rows[0] + int(rng.integers(0, extent - int(KEPT * extent) + 1))
    kept = slice(start, start + int(KEPT * extent))
    return image[kept], label[kept]


CORRUPTIONS: dict[str, tuple[str, Callable]] = {
    "noise": (f"Gaussian noise of {NOISE} x the brain's intensity spread added", noise),
    "blur": (f"Gaussian blur of {BLUR} voxels in-plane", blur),
    "scale": (f"every intensity x {SCALE:g}", scale),
    "cropped": (f"the field of view cut to {KEPT:.0%} of the head's extent along one axis", cropped),
}


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--cases", type=int, default=40, help="heads of the cross-validation")
    parser.add_argument("--test-cases", type=int, default=20, help="heads held out of everything")
    parser.add_argument("--steps", type=int, default=800, help="training steps per fold")
    parser.add_argument("--splits", choices=SPLITS, default="regions", help="; ".join(f"{k}: {v}" for k, v in
                                                                               SPLITS.items()))
    args = parser.parse_args(argv)
    if args.cases < 2 * FOLDS or args.test_cases < 2:
        parser.error(f"--cases needs two heads per fold (>= {2 * FOLDS}), --test-cases at least 2")
    return args


def write_heads(root: Path, names: list[str], cases: Callable[[int], tuple[np.ndarray, np.ndarray]]) -> Path:
    """A Decathlon folder of these cases ((image, label) of case i)."""
    for i, name in enumerate(names):
        image, label = cases(i)
        write_case(root, name, [image], label, affine_for(SPACING, "RAS", image.shape))
    return write_dataset_json(root, "decathlon", CLASS_NAMES, ["T1"], names, name="Heads")


def case_names(dataset: Path) -> list[str]:
    """The labelled cases of a Decathlon folder, sorted."""
    return sorted(path.name.removesuffix(".nii.gz") for path in (dataset / "labelsTr").glob("*.nii.gz"))


def held_out_heads(output: Path, cases: int) -> Path:
    root = output / "test"
    if not (root / "dataset.json").is_file():
        heads = [heads_case(i, TEST_SEED) for i in range(cases)]
        write_heads(root, [f"test_{i:03d}" for i in range(cases)], lambda i: (heads[i].image, heads[i].label))
    return root


def corrupted_heads(output: Path, test: Path, kind: str) -> Path:
    """The test heads with one corruption each (seeded by the case), as a dataset folder of their own."""
    import nibabel as nib

    root = output / "corrupted" / kind
    if (root / "dataset.json").is_file():
        return root
    names = case_names(test)

    def case(i: int) -> tuple[np.ndarray, np.ndarray]:
        image = np.asarray(nib.load(test / "imagesTr" / f"{names[i]}.nii.gz").dataobj, np.float32)
        label = np.asarray(nib.load(test / "labelsTr" / f"{names[i]}.nii.gz").dataobj, np.uint8)
        image, label = CORRUPTIONS[kind][1](image, label, np.random.default_rng(i))
        return image.astype(np.float32), label

    return write_heads(root, names, case)


def write_random_splits(dataset: Path) -> None:
    """splits_final.json of FOLDS folds drawn at random (seed 0) in place of the generator's."""
    names = case_names(dataset)
    order = np.random.default_rng(0).permutation(names).tolist()
    folds = [sorted(order[k::FOLDS]) for k in range(FOLDS)]
    splits = [{"train": sorted(set(names) - set(val)), "val": val} for val in folds]
    (dataset / "splits_final.json").write_text(json.dumps(splits, indent=1))


def train_folds(output: Path, dataset: Path, steps: int) -> list[Path]:
    runs = []
    for fold in range(FOLDS):
        run = output / "runs" / f"2d_fold{fold}"
        if not (run / "metrics.json").is_file():
            shutil.rmtree(run, ignore_errors=True)  # an interrupted run starts again
            run_command("segnet-train", [*folder_training(dataset, 2, fold, 0), f"trainer.max_steps={steps}",
                                         "logger=csv"], run)
        runs.append(run)
    return runs


def final_checkpoint(run: Path) -> str:
    return json.loads((run / "metrics.json").read_text())["checkpoints"]["final"]


def predict(checkpoints: list[str], images: Path, output: Path, temperature: str | float) -> Path:
    """segnet-predict of these images (mirrored, uncertainty=true, save_probabilities=true)."""
    if not (output / "uncertainty.csv").is_file():
        shutil.rmtree(output, ignore_errors=True)
        run_command("segnet-predict", [f"ckpt_path=[{','.join(checkpoints)}]", f"input={images}",
                                       f"output={output / 'predicted'}", f"temperature={temperature}",
                                       "uncertainty=true", "save_probabilities=true", "postprocessing=none",
                                       "num_workers=0"], output / "run")
        shutil.copy(output / "predicted" / "uncertainty.csv", output / "uncertainty.csv")
    return output / "predicted"


def case_scores(predicted: Path) -> dict[str, dict[str, float]]:
    """Each case's uncertainty.csv score and its disagreement (SCORES)."""
    with open(predicted / "uncertainty.csv") as handle:
        written = {row["case"]: float(row["score"]) for row in csv.DictReader(handle)}
    return {case: {"score": value, "disagreement": disagreement(predicted, case)} for case, value in written.items()}


def disagreement(predicted: Path, case: str) -> float:
    """The members' mutual information (normalized, as written) averaged over the voxels the score
    counts: uncertain for a foreground class or labelled one."""
    with np.load(predicted / f"{case}.npz") as saved:
        probabilities = saved["probabilities"]
    with np.load(predicted / f"{case}_uncertainty.npz") as saved:
        information = saved["mutual_information"]
    foreground = probabilities[1:]
    counted = (((foreground >= BAND) & (foreground <= 1 - BAND)).any(0)) | (probabilities.argmax(0) > 0)
    return float(information[counted].mean()) if counted.any() else 0.0


def case_dice(predicted: Path, dataset: Path, cases: list[str]) -> dict[str, float]:
    """Each case's Dice, the mean over the foreground classes."""
    rows = [row for row in scores(predicted, dataset, cases, "segnet", 0) if row["metric"] == "Dice"]
    return {case: float(np.nanmean([row["value"] for row in rows if row["case"] == case])) for case in cases}


def case_calibration(predicted: Path, dataset: Path, case: str) -> dict[str, tuple[Calibration, float, int]]:
    """A case's calibration sums over the foreground classes, its NLL summed and its voxel count,
    over each of SCORED's voxels."""
    import nibabel as nib

    reference = np.asarray(nib.load(dataset / "labelsTr" / f"{case}.nii.gz").dataobj, np.int64)
    with np.load(predicted / f"{case}.npz") as saved:
        probabilities = saved["probabilities"].astype(np.float64)
    units = [(value,) for value in range(1, len(CLASS_NAMES))]
    nll = -np.log(np.clip(np.take_along_axis(probabilities, reference[None], 0)[0], EPSILON, 1))
    near = ndimage.binary_dilation((reference > 0) | (probabilities.argmax(0) > 0), np.ones((3, 3, 1), bool), NEAR)
    found = {}
    for region, scored in zip(SCORED, (np.ones(reference.shape, bool), near), strict=True):
        outside = np.where(scored, reference, IGNORED)
        found[region] = (Calibration.of(probabilities, outside, units, IGNORED), float(nll[scored].sum()),
                         int(scored.sum()))
    return found


def calibration_row(before: list[tuple[Calibration, float, int]], after: list[tuple[Calibration, float, int]]
                    ) -> dict[str, Any]:
    """The pooled foreground ECE, Brier and NLL with temperature 1 and the fitted one, and a
    bootstrap over cases of each change."""
    def pooled(rows: list[tuple[Calibration, float, int]], chosen: np.ndarray) -> np.ndarray:
        total = sum((rows[i][0] for i in chosen[1:]), rows[chosen[0]][0])
        voxels = sum(rows[i][2] for i in chosen)
        return np.array([total.foreground_ece(), float(total.brier().mean()), sum(rows[i][1] for i in chosen) / voxels])

    every = np.arange(len(before))
    rng = np.random.default_rng(0)
    draws = [rng.integers(0, len(before), len(before)) for _ in range(BOOTSTRAP)]
    changes = np.array([pooled(after, d) - pooled(before, d) for d in draws])
    low, high = np.percentile(changes, [2.5, 97.5], 0)
    row: dict[str, Any] = {"cases": len(before)}
    for k, name in enumerate(("ECE", "Brier", "NLL")):
        row[name] = {"before": float(pooled(before, every)[k]), "after": float(pooled(after, every)[k]),
                     "ci_low": float(low[k]), "ci_high": float(high[k])}
    return row


def auroc(positives: list[float], negatives: list[float]) -> float:
    """The chance that a positive scores above a negative (ties count half)."""
    return float(stats.mannwhitneyu(positives, negatives).statistic / (len(positives) * len(negatives)))


def spearman(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each score's rank correlation with the cases' Dice (a useful score's is negative)."""
    found = {}
    for name in SCORES:
        rho, p = stats.spearmanr([row[name] for row in rows], [row["dice"] for row in rows])
        found[name] = {"rho": float(rho), "p": float(p)}
    return found


def cross_validation(output: Path, dataset: Path, runs: list[Path]) -> dict[str, Any]:
    splits = json.loads((dataset / "splits_final.json").read_text())
    rows = []
    for fold, run in enumerate(runs):
        cases = splits[fold]["val"]
        images = output / "cv" / f"fold{fold}_images"  # beside the predictions: predict() starts its folder afresh
        images.mkdir(parents=True, exist_ok=True)
        for case in cases:
            link = images / f"{case}.nii.gz"
            if not link.exists():
                link.symlink_to(dataset / "imagesTr" / link.name)
        predicted = predict([final_checkpoint(run)], images, output / "cv" / f"fold{fold}", DEFAULT_TEMPERATURE)
        found, dice = case_scores(predicted), case_dice(predicted, dataset, cases)
        rows += [{"case": case, "fold": fold, **found[case], "dice": dice[case]} for case in cases]
    return {"cases": rows, "spearman": spearman(rows)}


def held_out_calibration(output: Path, test: Path, runs: list[Path], temperature: str) -> dict[str, Any]:
    """Each fold's model and their ensemble on the test heads with temperature 1 and the fitted
    one: the change per SCORED voxels, and the ensemble's reliability near the structures."""
    names = case_names(test)
    models = {f"fold {fold}": [final_checkpoint(run)] for fold, run in enumerate(runs)}
    models["ensemble of the 5 folds"] = [final_checkpoint(run) for run in runs]
    rows, reliability = {}, {}
    for model, checkpoints in models.items():
        folder = output / "test_predictions" / model.replace(" ", "_")
        sums = {}
        for tempered, value in (("before", 1), ("after", temperature)):
            predicted = predict(checkpoints, test / "imagesTr", folder / tempered, value)
            sums[tempered] = [case_calibration(predicted, test, case) for case in names]
            if model.startswith("ensemble"):
                near = [each[SCORED[1]][0] for each in sums[tempered]]
                total = sum(near[1:], near[0])
                reliability[tempered] = [total.reliability(unit) for unit in range(len(CLASS_NAMES) - 1)]
        rows[model] = {region: calibration_row([each[region] for each in sums["before"]],
                                               [each[region] for each in sums["after"]]) for region in SCORED}
    return {"models": rows, "reliability": reliability}


def corruption_study(output: Path, test: Path, runs: list[Path]) -> dict[str, Any]:
    names = case_names(test)
    ensemble = [final_checkpoint(run) for run in runs]
    groups = {}
    for kind, dataset in [("clean", test)] + [(kind, corrupted_heads(output, test, kind)) for kind in CORRUPTIONS]:
        predicted = predict(ensemble, dataset / "imagesTr", output / "corrupted_predictions" / kind,
                            DEFAULT_TEMPERATURE)
        found, dice = case_scores(predicted), case_dice(predicted, dataset, names)
        groups[kind] = [{"case": case, **found[case], "dice": dice[case]} for case in names]
    clean = groups["clean"]
    rows = {}
    for kind in CORRUPTIONS:
        copies = groups[kind]
        pairs = list(zip(copies, clean, strict=True))  # each copy beside its own clean case
        rows[kind] = {"dice_change": float(np.mean([copy["dice"] - own["dice"] for copy, own in pairs]))}
        for name in SCORES:
            rows[kind][name] = {
                "auroc": auroc([row[name] for row in copies], [row[name] for row in clean]),
                "above_own_clean": float(np.mean([copy[name] > own[name] for copy, own in pairs]))}
    return {"groups": groups, "rows": rows, "spearman": spearman([row for group in groups.values() for row in group])}


def report(result: dict[str, Any], output: Path) -> str:
    cv, test, corrupted = result["cross_validation"], result["test"], result["corrupted"]
    temperatures = ", ".join(f"{name} {value:.3f}" for name, value in result["temperature"].items())
    lines = [f"# Uncertainty and calibration: {result['cases']} heads in 5 folds, {result['test_cases']} test heads, "
             f"{result['steps']} steps a fold", "", f"Folds: {SPLITS[result['splits']]}.", "",
             f"Compared: {COMPARED}.", "",
             f"The temperature segnet-find-best-configuration fitted on the out-of-fold probabilities: {temperatures}.",
             "", "| model, on the test heads | voxels | metric | T = 1 | fitted T | change [95 %] |",
             "|---|---|---|---|---|---|"]
    for model, regions in test["models"].items():
        for region, row in regions.items():
            for metric in ("ECE", "Brier", "NLL"):
                m = row[metric]
                lines.append(f"| {model} | {region} | {metric} | {m['before']:.4f} | {m['after']:.4f} | "
                             f"{m['after'] - m['before']:+.4f} [{m['ci_low']:+.4f}, {m['ci_high']:+.4f}] |")
    header = ["score", "Spearman with Dice, cross-validation", "Spearman with Dice, test heads clean and corrupted",
              *(f"AUROC {kind}" for kind in CORRUPTIONS)]
    lines += ["", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for name, what in SCORES.items():
        aurocs = " | ".join(f"{corrupted['rows'][kind][name]['auroc']:.2f}" for kind in CORRUPTIONS)
        correlations = " | ".join(f"{found[name]['rho']:+.3f} (p {found[name]['p']:.2g})"
                                  for found in (cv["spearman"], corrupted["spearman"]))
        lines.append(f"| {name}: {what} | {correlations} | {aurocs} |")
    lines += ["", "| corruption | what | mean Dice change | " + " | ".join(f"{name}: copies above their clean case"
                                                                         for name in SCORES) + " |",
              "|---" * (3 + len(SCORES)) + "|"]
    for kind, row in corrupted["rows"].items():
        lines.append(f"| {kind} | {CORRUPTIONS[kind][0]} | {row['dice_change']:+.3f} | "
                     + " | ".join(f"{row[name]['above_own_clean']:.0%}" for name in SCORES) + " |")
    text = "\n".join(lines) + "\n"
    (output / "uncertainty.md").write_text(text)
    return text


def plot(result: dict[str, Any], output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reliability = result["test"]["reliability"]
    fitted = ", ".join(f"{value:.2f}" for value in result["temperature"].values())
    figure, axes = plt.subplots(1, len(CLASS_NAMES) - 1, figsize=(5 * (len(CLASS_NAMES) - 1), 4.5), squeeze=False)
    for unit, axis in enumerate(axes[0]):
        axis.plot([0, 1], [0, 1], color="grey", linewidth=0.8)
        for tempered, label in (("before", "T = 1"), ("after", f"fitted T = {fitted}")):
            bins = reliability[tempered][unit]
            axis.plot(bins["probability"], bins["frequency"], marker="o", label=label)
        axis.set(title=f"{CLASS_NAMES[unit + 1]}: ensemble, test heads,\n{SCORED[1]}",
                 xlabel="predicted probability", ylabel="observed frequency")
        axis.legend()
    figure.tight_layout()
    figure.savefig(output / "uncertainty-reliability.png", dpi=100)
    plt.close(figure)

    cv = result["cross_validation"]
    figure, axes = plt.subplots(1, len(SCORES), figsize=(6 * len(SCORES), 4.5), squeeze=False)
    for axis, name in zip(axes[0], SCORES, strict=True):
        for fold in range(FOLDS):
            mine = [row for row in cv["cases"] if row["fold"] == fold]
            axis.scatter([r[name] for r in mine], [r["dice"] for r in mine],
                         label=f"fold {fold} ({REGIONS[fold].name})")
        axis.set(title=f"Cross-validation: Spearman {cv['spearman'][name]['rho']:+.2f}",
                 xlabel=f"{name} (higher: less sure)", ylabel="Dice (mean over classes)")
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(output / "uncertainty-score-vs-dice.png", dpi=100)
    plt.close(figure)

    groups, rows = result["corrupted"]["groups"], result["corrupted"]["rows"]
    figure, axes = plt.subplots(1, len(SCORES), figsize=(7 * len(SCORES), 4.5), squeeze=False)
    for axis, name in zip(axes[0], SCORES, strict=True):
        for x, group in enumerate(groups.values()):
            axis.scatter(x + np.linspace(-0.15, 0.15, len(group)), [row[name] for row in group], s=14)
        ticks = [kind if kind == "clean" else f"{kind}\nAUROC {rows[kind][name]['auroc']:.2f}" for kind in groups]
        axis.set_xticks(range(len(groups)), ticks)
        axis.set(title="Test heads and corrupted copies (the folds' ensemble)", ylabel=name)
    figure.tight_layout()
    figure.savefig(output / "uncertainty-corrupted.png", dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    output = args.output.resolve()
    output.mkdir(parents=True, exist_ok=True)
    dataset = output / "heads"
    if not (dataset / "dataset.json").is_file():
        write_heads_dataset(dataset, args.cases)
        if args.splits == "random":
            write_random_splits(dataset)
    test = held_out_heads(output, args.test_cases)
    runs = train_folds(output, dataset, args.steps)
    best = output / "find_best"
    if not (best / "best_configuration.json").is_file():
        run_command("segnet-find-best-configuration", [f"data.root={dataset}", f"runs=[{','.join(map(str, runs))}]"],
                    best)
    chosen = best / "best_configuration.json"
    result = {"cases": args.cases, "test_cases": args.test_cases, "steps": args.steps, "splits": args.splits,
              "compared": COMPARED,
              "temperature": json.loads(chosen.read_text())["temperature"],
              "cross_validation": cross_validation(output, dataset, runs),
              "test": held_out_calibration(output, test, runs, str(chosen)),
              "corrupted": corruption_study(output, test, runs)}
    (output / "uncertainty.json").write_text(json.dumps(result, indent=1))
    plot(result, output)
    print(report(result, output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
