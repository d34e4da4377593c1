"""The runs a cross-validation scores: segnet-postprocess and segnet-find-best-configuration
decide on each run's validation cases, so a run that trained on them (data.fold=all, whose
validation cases are its training cases) would score in-sample and favour the model that overfits
most. As nnU-Net's postprocessing and find_best_configuration use the cross-validation's folds
alone, such a run is left out with a warning, and named in the command's output.

A run is a segnet training run folder or a fold of an nnU-Net v2 trained model (its fold_<N>
folder, or a checkpoint in it: segnet.nnunet), validated on the cases segnet's split of the
dataset gives that fold, as nnU-Net splits."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from segnet.checkpoints.paths import check_checkpoint_file
from segnet.data.dataset_json import DatasetDescription
from segnet.errors import ConfigError
from segnet.evaluation.evaluator import in_sample_cases, run_split
from segnet.nnunet.folder import run_checkpoint
from segnet.nnunet.plans import checkpoint_data

log = logging.getLogger(__name__)


def in_sample(folder: Path, data: dict[str, Any], description: DatasetDescription) -> str | None:
    """Why the run in `folder` would score in-sample (the validation cases it trained on), or None
    where it trained on none of them."""
    split = run_split(description, data, folder / "splits.json")
    trained_on = in_sample_cases(split.val, split)
    if not trained_on:
        return None
    return f"it trained on {len(trained_on)} of its {len(split.val)} validation case(s) (data.fold={split.fold})"


def cross_validation_runs(folders: list[Path], checkpoint_name: str, description: DatasetDescription,
                          usage: str) -> tuple[dict[Path, dict[str, Any]], dict[str, str]]:
    """{run folder: its checkpoint's data settings} of the runs in `folders` that validated on cases
    they did not train on, in the order given, and {run folder: why} of those left out."""
    kept, left_out = {}, {}
    for folder in folders:
        checkpoint = run_checkpoint(folder, checkpoint_name)
        check_checkpoint_file(checkpoint, "runs", f"training run folders ({usage})")
        data = checkpoint_data(checkpoint)
        why = in_sample(folder, data, description)
        if why is None:
            kept[folder] = data
        else:
            left_out[str(folder.resolve())] = why
            log.warning("runs: %s is left out: %s, so its scores would be in-sample; only the cross-validation's "
                        "folds are scored (data.fold=0, 1, ...), as nnU-Net scores them", folder, why)
    if not kept:
        raise ConfigError(f"runs: every run trained on the cases it validated on """
                          f"({'; '.join(f'{run}: {why}' for run, why in left_out.items())}), "
                          "so none can be scored out of sample: give the runs of the cross-validation's folds "
                          f"(data.fold=0, 1, ...): {usage}")
    return kept, left_out
