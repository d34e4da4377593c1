"""A checkpoint and the cases of a dataset it predicts to be scored: the first steps of
segnet-evaluate, segnet-postprocess and segnet-find-best-configuration, which then each predict
and score the cases their own way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from segnet.data.dataset_json import Case, DatasetDescription
from segnet.data.input_check import check_inputs
from segnet.evaluation.evaluator import check_compatible, select_cases
from segnet.inference.ensemble import Predictor
from segnet.inference.loading import load_for_inference
from segnet.inference.prediction_writer import PredictionWriter
from segnet.inference.previous_stage import first_stage_maps
from segnet.inference.trained_model import TrainedModel


@dataclass(frozen=True)
class CheckpointCases:
    """A checkpoint's model and the cases it predicts to be scored."""

    model: TrainedModel  # checked to name the dataset's channels and classes as its run did
    cases: list[Case]  # the split's, their images checked
    description: DatasetDescription
    device: str
    backend: str  # the edge op's, for the cascade's first stage too

    def first_stage_maps(self, output: Path, workers: int = 0) -> dict[str, Path] | None:
        """A cascade's first-stage label map of each case: out of fold where a first-stage run
        validated on it, else predicted into `output`; None for a model that is no cascade."""
        return first_stage_maps(self.model.settings.previous_stage, self.cases, output, self.device, self.backend,
                                workers, self.description)

    def writer(self, output: Path, tta: bool, save_probabilities: bool = False) -> PredictionWriter:
        """The model's label maps of the cases, without postprocessing, written into `output`."""
        return PredictionWriter(Predictor([self.model], tta=tta), output, save_probabilities=save_probabilities,
                                previous=self.first_stage_maps(output))


def checkpoint_cases(checkpoint: Path, run: Path, split: str, description: DatasetDescription, cfg: DictConfig,
                     task: str) -> CheckpointCases:
    """The checkpoint of `run` (whose splits.json names its validation cases) loaded on cfg.device
    with cfg.op.backend, and its cases of `split` of the dataset, whose images must be readable
    to be `task` (say "evaluated")."""
    model = load_for_inference(checkpoint, cfg.device, cfg.op.backend)
    check_compatible(model, description, checkpoint)
    cases = select_cases(description, split, model.data, run / "splits.json")
    check_inputs(cases, int(cfg.data.max_voxels), description.in_channels, task)
    return CheckpointCases(model, cases, description, cfg.device, cfg.op.backend)
