"""From a postprocessing config to postprocessing.json: what segnet-postprocess runs.

Each run (a fold of the cross-validation; one that trained on its validation cases, data.fold=all,
is left out: segnet.postprocessing.cross_validation) predicts the cases it was validated on with its
checkpoint, as segnet-evaluate does but without any postprocessing; every case is scored under
each rule as it is predicted (segnet.postprocessing.decide), with region-based labels under each
region's rule on top of those kept before it from its written label map, and the rules that raise
the mean Dice are written to the output folder and into every run folder, where segnet-predict
and segnet-evaluate find them (postprocessing=auto)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from segnet.data.dataset_json import describe_dataset
from segnet.data.image_files import read_label
from segnet.data.regions import foreground_units
from segnet.errors import ConfigError
from segnet.evaluation.checkpoint_cases import checkpoint_cases
from segnet.evaluation.evaluator import read_reference
from segnet.files import write_json
from segnet.inference.component_rules import FILE, Rules, case_scores, unit_dice
from segnet.metrics import nanmean
from segnet.nnunet.folder import run_checkpoint
from segnet.postprocessing.cross_validation import cross_validation_runs
from segnet.postprocessing.decide import decide, decide_regions

log = logging.getLogger(__name__)
USAGE = "segnet-postprocess data.root=DATASET 'runs=[RUN_FOLD0,RUN_FOLD1,...]'"


@dataclass(frozen=True)
class ScoredCase:
    scores: dict[str, list[float]]  # Dice per class (or region) under each trial (case_scores)
    prediction: Path  # its label map, as written without postprocessing
    reference: str


def fold_scores(run: Path, cfg: DictConfig, description, output: Path) -> dict[str, ScoredCase]:
    """Every validation case of one run, predicted and scored under each trial, by case name."""
    validated = checkpoint_cases(run_checkpoint(run, cfg.checkpoint), run, "validation", description, cfg,
                                 "postprocessed")
    writer = validated.writer(output, bool(cfg.tta))
    scores = {}
    for case in validated.cases:
        prediction = writer.run_case(case)
        reference, _ = read_reference(case.label, prediction.label_map.shape)
        scores[case.name] = ScoredCase(case_scores(prediction.label_map, reference, description.num_classes,
                                                   description.ignore_label, description.regions),
                                       prediction.file, case.label)
    log.info("%s: %d validation case(s) predicted into %s", run, len(validated.cases), output)
    return scores


def rescored(cases: list[ScoredCase], rules: Rules, description) -> list[list[float]]:
    """Every case's Dice per foreground unit under `rules`, from its written label map."""
    units = foreground_units(description.num_classes, description.regions)
    per_case = []
    for case in cases:
        prediction, _ = read_label(str(case.prediction))
        reference, _ = read_reference(case.reference, prediction.shape)
        per_case.append(unit_dice(rules.apply(prediction), reference, units, description.ignore_label))
    return per_case


def postprocess_command(cfg: DictConfig) -> dict[str, Any]:
    if OmegaConf.is_missing(cfg.data, "root") or not cfg.get("runs"):
        raise ConfigError(f"data.root and runs are required: {USAGE}")
    description = describe_dataset(str(cfg.data.root))
    kept, left_out = cross_validation_runs([Path(run) for run in cfg.runs], cfg.checkpoint, description, USAGE)
    runs = list(kept)
    output = Path(cfg.paths.output_dir)
    folds = [fold_scores(run, cfg, description, output / f"run_{i}") for i, run in enumerate(runs)]
    cases = [case for fold in folds for case in fold.values()]
    names = description.class_names[1:]
    if description.regions is None:
        rules, means = decide(case.scores for case in cases)
    else:
        rules, means = decide_regions((case.scores for case in cases), description.regions, names,
                                      lambda trial: rescored(cases, trial, description))
    record = {**rules.to_json(), "decided_on": {
        "runs": [str(run.resolve()) for run in runs], "left_out": left_out, "cases": len(cases),
        "case_names": sorted({name for fold in folds for name in fold}),
        "checkpoint": cfg.checkpoint, "tta": bool(cfg.tta),
        "mean_dice_per_class": {trial: dict(zip(names, values, strict=True)) for trial, values in means.items()}}}
    for folder in (output, *runs):
        write_json(folder / FILE, record)
    log.info("postprocessing %s (mean foreground Dice %.4f, %.4f without) in %s and the %d run folder(s)",
             rules.to_json(), nanmean(means["chosen"]), nanmean(means["none"]), output, len(runs))
    return record
