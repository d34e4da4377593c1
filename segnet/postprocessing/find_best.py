"""segnet-find-best-configuration: which configuration, or which pair's ensemble, to predict with,
as nnUNetv2_find_best_configuration decides it on the cross-validation.

The runs are training run folders of one dataset, grouped by the configuration each records (2d,
3d, 3d_lowres) and by fold: every configuration needs the same folds, and a fold the same
validation cases in each; a run that trained on its validation cases (data.fold=all) is left out
(segnet.postprocessing.cross_validation). Each run predicts the cases it was validated on with its
checkpoint (flipped as segnet-predict predicts, tta), keeping the probabilities on the image's
grid (<output>/<configuration>/fold_<k>/). Every case is scored under every candidate
(segnet.evaluation.candidates) by segnet-evaluate's evaluator, the best is chosen, and
postprocessing is decided for it as segnet-postprocess decides (segnet.postprocessing.decide).

Written to the output folder: best_configuration.json (the choice, its rule, every candidate's
means, the paired comparisons with the best, each run's checkpoint's sha256 as scored, the runs
left out and the segnet-predict command that predicts with it), best_configuration.md and .png,
scores.csv (every score), and the best's postprocessing.json, which the command names.

Each configuration's temperature is fitted on its out-of-fold probabilities
(segnet.inference.temperature) and recorded in best_configuration.json (`temperature`, and
`temperature_fit`: the NLL before and after), not applied: the candidates are scored on the
probabilities segnet-predict gives by default, and `tempered` is the command that applies it
(temperature=).
"""

from __future__ import annotations

import csv
import logging
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from segnet.checkpoints.settings import RunSettings
from segnet.data.dataset_json import Case, DatasetDescription, describe_dataset
from segnet.data.derived import file_digest
from segnet.data.regions import foreground_units
from segnet.errors import ConfigError
from segnet.evaluation.candidates import METRICS, Candidate, candidates, choose, ensemble_probabilities
from segnet.evaluation.checkpoint_cases import checkpoint_cases
from segnet.evaluation.evaluator import read_reference, score_case
from segnet.files import write_json
from segnet.inference.component_rules import FILE, Rules, case_scores, unit_dice
from segnet.inference.ensemble import label_map_of
from segnet.inference.temperature import fit_temperature, voxel_sample
from segnet.nnunet.folder import run_checkpoint
from segnet.postprocessing.cross_validation import cross_validation_runs
from segnet.postprocessing.decide import decide, decide_regions
from segnet.progress import bar, say, step

log = logging.getLogger(__name__)
USAGE = "segnet-find-best-configuration data.root=DATASET 'runs=[RUN, ...]'"
RESULT = "best_configuration"


@dataclass(frozen=True)
class Run:
    folder: Path
    checkpoint: Path
    configuration: str
    fold: str
    sha256: str  # the checkpoint's, as scored: segnet-export-model packs a choice's runs only as they were


def read_runs(folders: list[Path], checkpoint_name: str,
              description: DatasetDescription) -> tuple[dict[str, dict[str, Run]], dict[str, str]]:
    """{configuration: {fold: run}} of the cross-validation's runs, from the settings each run's
    checkpoint holds, in the order given, every configuration on the same folds; and {run: why}
    of the runs left out, which trained on their validation cases (cross_validation_runs)."""
    kept, left_out = cross_validation_runs(folders, checkpoint_name, description, USAGE)
    grouped: dict[str, dict[str, Run]] = {}
    for folder, data in kept.items():
        checkpoint = run_checkpoint(folder, checkpoint_name)
        settings = RunSettings.from_data(data)
        run = Run(folder, checkpoint, settings.configuration, str(settings.fold), file_digest(checkpoint))
        by_fold = grouped.setdefault(run.configuration, {})
        if run.fold in by_fold:
            raise ConfigError(f"runs: {by_fold[run.fold].folder} and {folder} are both fold {run.fold} of "
                              f"{run.configuration}: give one run per configuration and fold")
        by_fold[run.fold] = run
    folds = {name: sorted(by_fold) for name, by_fold in grouped.items()}
    if len({tuple(f) for f in folds.values()}) > 1:
        covered = "; ".join(f"{name}: fold(s) {', '.join(f)}" for name, f in folds.items())
        raise ConfigError(f"runs: the configurations cover different folds ({covered}); every configuration "
                          "needs the same folds: train the missing ones, or leave a fold out of every configuration")
    return grouped, left_out


def predict_validation(run: Run, cfg: DictConfig, description: DatasetDescription, output: Path) -> dict[str, Path]:
    """The run's validation cases predicted with probabilities kept: {case name: its .npz}."""
    validated = checkpoint_cases(run.checkpoint, run.folder, "validation", description, cfg, "predicted")
    writer = validated.writer(output, bool(cfg.tta), save_probabilities=True)
    for case in bar(validated.cases, "predicting", "case"):
        writer.run_case(case)
    log.info("%s (%s, fold %s): %d validation case(s) predicted into %s", run.folder, run.configuration, run.fold,
             len(validated.cases), output)
    return {case.name: writer.probabilities_path(case) for case in validated.cases}


def check_same_cases(saved: dict[str, dict[str, dict[str, Path]]]) -> None:
    """Every configuration's fold validated on the same cases, or the candidates are not paired."""
    first, *others = saved
    for name in others:
        for fold, cases in saved[name].items():
            if sorted(cases) != sorted(saved[first][fold]):
                raise ConfigError(f"runs: fold {fold} of {name} was validated on other cases than fold {fold} of "
                                  f"{first}: train every configuration with the same data.num_folds and "
                                  "data.split_seed (or the same splits_final.json)")


def case_probabilities(saved: dict[str, dict[str, dict[str, Path]]], fold: str, case: str) -> dict[str, np.ndarray]:
    """Each configuration's probabilities of the case, as segnet-predict gives them (untempered)."""
    return {name: np.load(by_fold[fold][case])["probabilities"] for name, by_fold in saved.items()}


def fit_temperatures(saved: dict[str, dict[str, dict[str, Path]]], cases: dict[str, Case],
                     description: DatasetDescription) -> dict[str, dict[str, float]]:
    """Each configuration's temperature, fitted on its out-of-fold probabilities of every validation
    case (segnet.inference.temperature), with the NLL before and after."""
    fitted = {}
    for name, by_fold in saved.items():
        samples = []
        for seed, (fold, case) in enumerate(validated(saved)):
            probabilities = np.load(by_fold[fold][case])["probabilities"]
            reference, _ = read_reference(cases[case].label, probabilities.shape[1:])
            regions = None if description.regions is None else description.regions.values
            samples.append(voxel_sample(probabilities, reference, regions, description.ignore_label, seed))
        p, truth = (np.concatenate(parts) for parts in zip(*samples, strict=True))
        fitted[name] = fit_temperature(p, truth, description.regions is not None)
        say("%s: temperature %.3f (NLL %.4f before, %.4f after, on %d out-of-fold voxels)", name,
            fitted[name]["temperature"], fitted[name]["nll_before"], fitted[name]["nll_after"], fitted[name]["voxels"])
    return fitted


def score_rows(candidate: Candidate, fold: str, case: Case, label_map: np.ndarray,
               description: DatasetDescription) -> list[dict[str, Any]]:
    """The evaluator's scores of one case's label map, as the statistics' tidy rows."""
    scored = score_case(label_map, case.label, list(description.class_names), ignore_label=description.ignore_label,
                        regions=description.regions)
    return [{"variant": candidate.name, "fold": fold, "seed": 0, "case": case.name, "class": c, "metric": metric,
             "value": values[metric]} for c, values in scored.items() for metric in METRICS]


def validated(saved: dict[str, dict[str, dict[str, Path]]]) -> list[tuple[str, str]]:
    """(fold, case name) of every validation case, once."""
    return [(fold, name) for fold, by_case in next(iter(saved.values())).items() for name in by_case]


def best_label_maps(best: Candidate, saved, cases: dict[str, Case], description) -> Iterator[tuple[Case, np.ndarray]]:
    """Each validation case and the best candidate's label map of it, read again from the probabilities."""
    for fold, name in validated(saved):
        probabilities = ensemble_probabilities(best, case_probabilities(saved, fold, name))
        yield cases[name], label_map_of(probabilities, description.regions)


def decide_postprocessing(best: Candidate, saved, cases: dict[str, Case], description) -> tuple[Rules, dict]:
    """segnet-postprocess's decision on the best candidate's label maps."""
    scores = [case_scores(label_map, read_reference(case.label, label_map.shape)[0], description.num_classes,
                          description.ignore_label, description.regions)
              for case, label_map in best_label_maps(best, saved, cases, description)]
    if description.regions is None:
        return decide(scores)
    units = foreground_units(description.num_classes, description.regions)

    def rescore(rules: Rules) -> list[list[float]]:
        return [unit_dice(rules.apply(label_map), read_reference(case.label, label_map.shape)[0], units,
                          description.ignore_label)
                for case, label_map in best_label_maps(best, saved, cases, description)]

    return decide_regions(scores, description.regions, description.class_names[1:], rescore)


def predict_command(runs: dict[str, dict[str, Run]], best: Candidate, rules_file: Path, tta: bool) -> str:
    checkpoints = [str(run.checkpoint.resolve()) for name in best.configurations for run in runs[name].values()]
    parts = ["segnet-predict", f"ckpt_path=[{','.join(checkpoints)}]", "input=INPUT_FOLDER", "output=OUTPUT_FOLDER",
             f"postprocessing={rules_file.resolve()}", *([] if tta else ["tta=false"])]
    return " ".join(shlex.quote(part) for part in parts)


def report_markdown(result: dict[str, Any]) -> str:
    lines = [f"# Best configuration: {result['best']}", "", f"Rule: {result['rule']}.", "",
             "| candidate | Dice | HD95 (mm) | NSD |", "|---|---|---|---|"]
    lines += [f"| {name} | {means['Dice']:.4f} | {means['HD95']:.2f} | {means['NSD']:.4f} |"
              for name, means in result["means"].items()]
    if result["compared_with_best"]:
        lines += ["", f"Each candidate minus {result['best']}, paired per case [95 % bootstrap interval]:", "",
                  "| candidate | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
        rows = {metric: {row["variant"]: row for row in result["compared_with_best"][metric]} for metric in METRICS}
        for name in rows["Dice"]:
            cells = [f"{r['mean_difference']:+.4f} [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] {r['verdict']}"
                     for r in (rows[metric][name] for metric in METRICS)]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    fitted = ", ".join(f"{name} {value:.3f}" for name, value in result["temperature"].items())
    lines += ["", f"Postprocessing decided for it: {result['postprocessing']}", "", "Predict with it:", "",
              f"    {result['predict']}", "",
              f"The temperature fitted on the out-of-fold probabilities ({fitted}) is recorded, not applied: it did "
              "not make the folds' ensemble better calibrated on held-out generated heads "
              "(docs/results/uncertainty.md). To apply it:", "", f"    {result['tempered']}", ""]
    return "\n".join(lines)


def plot(scores: list[dict[str, Any]], result: dict[str, Any], path: Path) -> None:
    """Each candidate's Dice per case (mean over classes), the best's marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["means"])
    per_case: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    for row in scores:
        if row["metric"] == "Dice" and not np.isnan(row["value"]):
            per_case[row["variant"]].setdefault(f"{row['fold']}/{row['case']}", []).append(row["value"])
    figure, axis = plt.subplots(figsize=(1.6 * len(names) + 2, 3.6))
    for x, name in enumerate(names):
        values = [float(np.mean(v)) for v in per_case[name].values()]
        axis.scatter([x] * len(values), values, s=10, alpha=0.5, color="#1f77b4")
        axis.plot([x - 0.25, x + 0.25], [result["means"][name]["Dice"]] * 2,
                  color="black" if name == result["best"] else "#888888", linewidth=2)
    axis.set_xticks(range(len(names)), names, rotation=30, ha="right")
    axis.set_ylabel("Dice per case (mean over classes)")
    axis.set_title(f"cross-validation: {result['best']} chosen")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_scores(scores: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["variant", "fold", "seed", "case", "class", "metric", "value"])
        writer.writeheader()
        writer.writerows(scores)


def find_best_command(cfg: DictConfig) -> dict[str, Any]:
    if OmegaConf.is_missing(cfg.data, "root") or not cfg.get("runs"):
        raise ConfigError(f"data.root and runs are required: {USAGE}")
    description = describe_dataset(str(cfg.data.root))
    output = Path(cfg.paths.output_dir)
    runs, left_out = read_runs([Path(run) for run in cfg.runs], cfg.checkpoint, description)
    listed = [(name, fold, run) for name, by_fold in runs.items() for fold, run in by_fold.items()]
    saved: dict[str, dict[str, dict[str, Path]]] = {}
    for number, (name, fold, run) in enumerate(listed, 1):  # the long part: every run predicts its cases
        with step(f"{name} fold {fold}: predicting its validation cases", number, len(listed)):
            saved.setdefault(name, {})[fold] = predict_validation(run, cfg, description, output / name / f"fold_{fold}")
    check_same_cases(saved)
    cases = {case.name: case for case in description.labelled}
    calibration = fit_temperatures(saved, cases, description)
    temperatures = {name: fitted["temperature"] for name, fitted in calibration.items()}
    options = candidates(list(runs))
    scores = []
    say("scoring %d case(s) under %d candidate(s)", len(validated(saved)), len(options))
    for fold, name in bar(validated(saved), "scoring", "case"):
        probabilities = case_probabilities(saved, fold, name)
        for option in options:
            label_map = label_map_of(ensemble_probabilities(option, probabilities), description.regions)
            scores += score_rows(option, fold, cases[name], label_map, description)
    choice = choose(scores, options)
    best = next(option for option in options if option.name == choice["best"])
    rules, means = decide_postprocessing(best, saved, cases, description)
    rules_file = output / FILE
    names = description.class_names[1:]
    write_json(rules_file, {**rules.to_json(), "decided_on": {
        "runs": [str(run.folder.resolve()) for name in best.configurations for run in runs[name].values()],
        "cases": len(validated(saved)), "case_names": sorted(name for _, name in validated(saved)),
        "checkpoint": cfg.checkpoint, "tta": bool(cfg.tta),
        "mean_dice_per_class": {trial: dict(zip(names, values, strict=True)) for trial, values in means.items()}}})
    command, result_file = predict_command(runs, best, rules_file, bool(cfg.tta)), output / f"{RESULT}.json"
    result = {**choice, "postprocessing": rules.to_json(),
              "runs": {name: {fold: str(run.folder.resolve()) for fold, run in by_fold.items()}
                       for name, by_fold in runs.items()},
              "checkpoint_sha256": {str(run.folder.resolve()): run.sha256 for by_fold in runs.values()
                                    for run in by_fold.values()},
              "left_out": left_out, "checkpoint": cfg.checkpoint, "tta": bool(cfg.tta),
              "temperature": temperatures, "temperature_fit": calibration,
              "predict": command, "tempered": f"{command} temperature={shlex.quote(str(result_file.resolve()))}"}
    write_json(result_file, result)
    (output / f"{RESULT}.md").write_text(report_markdown(result))
    plot(scores, result, output / f"{RESULT}.png")
    write_scores(scores, output / "scores.csv")
    log.info("best: %s (mean Dice %.4f); predict with:\n  %s", result["best"], choice["means"][result["best"]]["Dice"],
             result["predict"])
    return result
