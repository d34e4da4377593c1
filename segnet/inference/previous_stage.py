"""The cascade's first stage (nnU-Net's 3d_cascade_fullres reads 3d_lowres's label maps): the
low-resolution runs a cascade names (data.previous_stage, one run per fold) predict each case
first, and the cascade reads that label map as extra input channels.

- Out of fold, for training the cascade and for scoring its cross-validation: a case is
  predicted by the one run that validated on it (the run's splits.json), never by a run that
  trained on it, as nnU-Net's predicted_next_stage. Those label maps are kept in the run folder
  (<run>/predicted_next_stage/), made once under a lock and shared by every fold of the cascade;
  each carries the stamp of the model that made it, so a retrained first stage predicts again.
- On new images: every first-stage run together (the folds' ensemble), mirrored as segnet-predict
  predicts, into <output>/previous_stage/ before the cascade starts, as nnU-Net predicts 3d_lowres
  into the folder it passes as -prev_stage_predictions.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from segnet.checkpoints.paths import FINAL, check_checkpoint_file
from segnet.data.dataset_json import Case, DatasetDescription
from segnet.errors import ConfigError
from segnet.files import exclusive
from segnet.inference.component_rules import NONE
from segnet.inference.loading import load_for_inference
from segnet.inference.pipeline import predicted_cases
from segnet.inference.predictor import PredictionWriter, Predictor
from segnet.inference.provenance import model_record, stamp

log = logging.getLogger(__name__)
OUT_OF_FOLD = "predicted_next_stage"  # in each first-stage run: the cases it validated on
PREDICTED_FIRST = "previous_stage"  # in a prediction's output folder: the first stage's label maps
SETTING = "data.previous_stage"


def stage_checkpoint(run: str | Path) -> Path:
    checkpoint = Path(run) / "checkpoints" / FINAL
    check_checkpoint_file(checkpoint, SETTING, "the folder of a finished 3d_lowres run, one per fold")
    return checkpoint


def stage_writer(runs: Sequence[str | Path], output: Path, device: str) -> PredictionWriter:
    """The runs' ensemble (mirrored), writing label maps stamped with its record into `output`."""
    models = [load_for_inference(stage_checkpoint(run), device, "auto") for run in runs]
    predictor = Predictor(models, tta=True)
    record = model_record([stage_checkpoint(run) for run in runs], predictor, NONE, [])
    return PredictionWriter(predictor, output, stamp=stamp(record))


def validating_runs(runs: Sequence[str | Path]) -> dict[str, Path]:
    """{case name: the run that validated on it}, by the names its splits.json records; one run
    per case, and none that also trained on the case it validated (a data.fold=all run)."""
    validated: dict[str, Path] = {}
    for run in map(Path, runs):
        splits = run / "splits.json"
        if not splits.is_file():
            raise ConfigError(f"{SETTING}: {run} has no splits.json: give the folders of the 3d_lowres training runs, "
                              "one per fold")
        split = json.loads(splits.read_text())
        if set(split["train"]) & set(split["val"]):
            raise ConfigError(f"{SETTING}: {run} trained on the cases it validated on (fold {split['fold']}), so its "
                              "label maps of them are not out of fold: give the runs of folds 0 to k-1")
        for name in split["val"]:
            if name in validated:
                raise ConfigError(f"{SETTING}: {validated[name]} and {run} both validated on {name}: give "
                                  "one run per fold, all of one cross-validation")
            validated[name] = run
    return validated


def out_of_fold_runs(runs: Sequence[str | Path], names: Sequence[str]) -> dict[str, Path]:
    """{case name: the run that validated on it}, for every name."""
    validated = validating_runs(runs)
    missing = [name for name in names if name not in validated]
    if missing:
        raise ConfigError(f"{SETTING}: no run validated on {len(missing)} case(s) ({', '.join(missing[:5])}): give the "
                          "3d_lowres runs of every fold, so that each case is read as predicted by a run that never "
                          "trained on it")
    return {name: validated[name] for name in names}


def predict_out_of_fold(runs: Sequence[str | Path], cases: Sequence[Case], device: str = "auto") -> dict[str, Path]:
    """{case name: its out-of-fold first-stage label map}, predicting those not made yet."""
    owners = out_of_fold_runs(runs, [case.name for case in cases])
    found: dict[str, Path] = {}
    for run in dict.fromkeys(owners.values()):
        mine = [case for case in cases if owners[case.name] == run]
        writer = stage_writer([run], run / OUT_OF_FOLD, device)
        (run / OUT_OF_FOLD).mkdir(exist_ok=True)
        with exclusive(run / OUT_OF_FOLD / ".lock"):  # the cascade's folds may start together
            todo = [case for case in mine if not writer.is_done(case)]
            if todo:
                log.info("%s: predicting %d validation case(s) for the next stage", run, len(todo))
            for case in todo:
                writer.run_case(case)
        found.update({case.name: writer.label_path(case) for case in mine})
    return found


def first_stage_maps(runs: Sequence[str] | None, cases: Sequence[Case], output: Path, device: str,
                     workers: int = 0, description: DatasetDescription | None = None) -> dict[str, Path] | None:
    """{case name: its first-stage label map} for a cascade whose first stage is `runs` (None for
    a model that is no cascade): for the cases of `description` a first-stage run validated on,
    that run's (scores of a cascade's cross-validation must not rest on a first stage that
    trained on the case); for the rest, every run's ensemble."""
    if not runs:
        return None
    validated = validating_runs(runs) if description is not None else {}
    # the dataset's own labelled cases: a test image named like a training case is another image
    labelled = set(description.labelled) if description is not None else set()
    out_of_fold = {case for case in cases if case.name in validated and case in labelled}
    known = [case for case in cases if case in out_of_fold]
    new = [case for case in cases if case not in out_of_fold]
    found = predict_out_of_fold(runs, known, device) if known else {}
    return {**found, **(predict_first_stage(runs, new, output, device, workers) if new else {})}


def predict_first_stage(runs: Sequence[str | Path], cases: Sequence[Case], output: Path, device: str,
                        workers: int = 0) -> dict[str, Path]:
    """{case name: the first stage's label map} of new images: every run's ensemble, into
    <output>/previous_stage/ (what an earlier run of the same stage wrote there is kept)."""
    writer = stage_writer(runs, output / PREDICTED_FIRST, device)
    todo = [case for case in cases if not writer.is_done(case)]
    log.info("first stage: %d case(s) with %d 3d_lowres run(s) into %s", len(todo), len(runs), writer.output_dir)
    for _ in predicted_cases(writer, todo, workers):
        pass
    return {case.name: writer.label_path(case) for case in cases}

