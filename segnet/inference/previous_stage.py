"""The cascade's first stage (nnU-Net's 3d_cascade_fullres reads 3d_lowres's label maps): the
low-resolution runs a cascade names (data.previous_stage, one run per fold) predict each case
first, and the cascade reads that label map as extra input channels.

- Out of fold, for training the cascade and for scoring its cross-validation: a case of the
  dataset folder the first stage trained on is predicted by the one run that validated on it
  (the run's splits.json), never by a run that trained on it, as nnU-Net's predicted_next_stage.
  Those label maps are kept in the run folder (<run>/predicted_next_stage/), made once under a
  lock and shared by every fold of the cascade.
- On new images (those of any other folder, whatever their names): every first-stage run
  together (the folds' ensemble), mirrored as segnet-predict predicts, into
  <output>/previous_stage/ before the cascade starts, as nnU-Net predicts 3d_lowres into the
  folder it passes as -prev_stage_predictions.
Each label map carries the stamp of the model that made it and of the image it was made from
(segnet.inference.prediction_writer.PredictionWriter), so a retrained first stage predicts again, and so
does an image that is not the one an earlier map of its name was made from.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from segnet.checkpoints.paths import FINAL, check_checkpoint_file
from segnet.config import RUN_CONFIG
from segnet.data.dataset_json import Case, DatasetDescription
from segnet.errors import ConfigError
from segnet.files import exclusive
from segnet.inference.component_rules import NONE
from segnet.inference.ensemble import Predictor
from segnet.inference.loading import load_for_inference
from segnet.inference.pipeline import predicted_cases
from segnet.inference.prediction_writer import PredictionWriter
from segnet.inference.provenance import model_record, stamp

log = logging.getLogger(__name__)
OUT_OF_FOLD = "predicted_next_stage"  # in each first-stage run: the cases it validated on
PREDICTED_FIRST = "previous_stage"  # in a prediction's output folder: the first stage's label maps
SETTING = "data.previous_stage"


def stage_checkpoint(run: str | Path) -> Path:
    checkpoint = Path(run) / "checkpoints" / FINAL
    check_checkpoint_file(checkpoint, SETTING, "the folder of a finished 3d_lowres run, one per fold")
    return checkpoint


def stage_writer(runs: Sequence[str | Path], output: Path, device: str, backend: str) -> PredictionWriter:
    """The runs' ensemble (mirrored, with the edge op's `backend`), writing label maps stamped
    with its record into `output`, as NIfTI whatever the input (the cascade reads them back: a
    DICOM series' own format, a DICOM SEG, is for people, not for the second stage)."""
    models = [load_for_inference(stage_checkpoint(run), device, backend) for run in runs]
    predictor = Predictor(models, tta=True)
    record = model_record([stage_checkpoint(run) for run in runs], predictor, NONE, [])
    return PredictionWriter(predictor, output, stamp=stamp(record), output_format="nifti")


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


def trained_dataset(runs: Sequence[str | Path]) -> Path | None:
    """The dataset folder the first-stage runs trained on (their config.yaml's data.root),
    resolved; None where they do not say (a run from before config.yaml)."""
    roots = set()
    for run in map(Path, runs):
        config = run / RUN_CONFIG
        root = OmegaConf.load(config).data.get("root") if config.is_file() else None
        roots.add(Path(root).resolve() if root else None)
    if len(roots) > 1:
        raise ConfigError(f"{SETTING}: the runs trained on different datasets ({', '.join(sorted(map(str, roots)))}): "
                          "give the 3d_lowres runs of one cross-validation")
    return roots.pop()


def check_trained_on(runs: Sequence[str | Path], root: Path) -> None:
    """A cascade trains on out-of-fold label maps of the very dataset its first stage trained on."""
    trained = trained_dataset(runs)
    if trained is not None and trained != Path(root).resolve():
        raise ConfigError(f"{SETTING}: the 3d_lowres runs trained on {trained}, this cascade trains on {root}: their "
                          "label maps of its cases are out of fold only for the dataset they were cross-validated on; "
                          "train the cascade on that dataset, or train 3d_lowres on this one first")


def predict_out_of_fold(runs: Sequence[str | Path], cases: Sequence[Case], root: Path, device: str = "auto",
                        backend: str = "auto") -> dict[str, Path]:
    """{case name: its out-of-fold first-stage label map}, for cases of the dataset at `root`,
    predicting those not made yet."""
    check_trained_on(runs, root)
    owners = out_of_fold_runs(runs, [case.name for case in cases])
    found: dict[str, Path] = {}
    for run in dict.fromkeys(owners.values()):
        mine = [case for case in cases if owners[case.name] == run]
        writer = stage_writer([run], run / OUT_OF_FOLD, device, backend)
        (run / OUT_OF_FOLD).mkdir(exist_ok=True)
        with exclusive(run / OUT_OF_FOLD / ".lock"):  # the cascade's folds may start together
            todo = [case for case in mine if not writer.is_done(case)]
            if todo:
                log.info("%s: predicting %d validation case(s) for the next stage", run, len(todo))
            for case in todo:
                writer.run_case(case)
        found.update({case.name: writer.label_path(case) for case in mine})
    return found


def first_stage_maps(runs: Sequence[str] | None, cases: Sequence[Case], output: Path, device: str, backend: str,
                     workers: int = 0, description: DatasetDescription | None = None) -> dict[str, Path] | None:
    """{case name: its first-stage label map} for a cascade whose first stage is `runs` (None for
    a model that is no cascade): for the cases of `description` a first-stage run validated on,
    where it is the dataset the runs trained on, that run's (scores of a cascade's
    cross-validation must not rest on a first stage that trained on the case); for the rest,
    every run's ensemble."""
    if not runs:
        return None
    known = cross_validated(runs, cases, description) if description is not None else []
    new = [case for case in cases if case not in known]
    found = predict_out_of_fold(runs, known, description.root, device, backend) if known else {}
    return {**found, **(predict_first_stage(runs, new, output, device, backend, workers) if new else {})}


def cross_validated(runs: Sequence[str], cases: Sequence[Case], description: DatasetDescription) -> list[Case]:
    """The cases a first-stage run validated on: the labelled cases of the dataset the runs
    trained on (a test image, or another folder's case, named like one is another image)."""
    validated = validating_runs(runs)
    labelled = set(description.labelled)
    named = [case for case in cases if case.name in validated and case in labelled]
    trained = trained_dataset(runs)
    if not named or trained in (None, Path(description.root).resolve()):
        return named
    log.warning("%s: the 3d_lowres runs trained on %s, not on %s, so its %d case(s) named like their validation cases "
                "are read as other images, predicted by the folds' ensemble; if %s is a copy of %s, give the "
                "dataset's own folder to have them predicted out of fold", SETTING, trained, description.root,
                len(named), description.root, trained)
    return []


def predict_first_stage(runs: Sequence[str | Path], cases: Sequence[Case], output: Path, device: str, backend: str,
                        workers: int = 0) -> dict[str, Path]:
    """{case name: the first stage's label map} of new images: every run's ensemble, into
    <output>/previous_stage/ (what an earlier run of the same stage wrote there of the same image is kept)."""
    writer = stage_writer(runs, output / PREDICTED_FIRST, device, backend)
    todo = [case for case in cases if not writer.is_done(case)]
    log.info("first stage: %d case(s) with %d 3d_lowres run(s) into %s", len(todo), len(runs), writer.output_dir)
    for _ in predicted_cases(writer, todo, workers):
        pass
    return {case.name: writer.label_path(case) for case in cases}

