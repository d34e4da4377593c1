"""Class probabilities of an image from one model or an ensemble, shared by segnet-predict and
evaluation: one checkpoint or several (e.g. the five folds: their softmax averaged, or for
region-based labels their sigmoids, turned into a label map by the regions' class order), flip
test-time augmentation over the model's own spatial axes, under the autocast the model trained with.

An ensemble's models may come from several configurations (plans: a 2D and a 3D model, another
spacing), as nnU-Net ensembles its configurations: the models of one configuration are averaged
on its grid, and the configurations' probabilities, each mapped back to the image's grid
(segnet.inference.prediction_writer), are averaged there with equal weights (five folds of one
configuration count as one).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from segnet.data.regions import Regions
from segnet.errors import ConfigError
from segnet.inference.temperature import configuration_temperature, tempered
from segnet.inference.trained_model import TrainedModel
from segnet.inference.uncertainty import disagreement, with_member_entropy
from segnet.inference.windows import (
    flipped_probabilities,
    on_device_or_host,
    plain,
    predict_with_flips,
    probabilities_of,
    training_autocast,
)


def label_map_of(probabilities: np.ndarray, regions: Regions | None) -> np.ndarray:
    """The label map (uint8) of `probabilities`: the likeliest class, or the regions painted."""
    if regions is None:
        return probabilities.argmax(0).astype(np.uint8)
    return regions.label_map(probabilities).astype(np.uint8)


@dataclass
class Configuration:
    """The models of one plan: loaded alike, their probabilities averaged on the plan's grid."""
    models: list[TrainedModel]
    spatial_dims: int
    # Loading as training loaded: the plan's normalization (None: per-volume z-score),
    # orientation, spacing (None: as stored) and crop (None: the whole volume, as runs before it was planned).
    geometry: dict[str, Any]
    # A cascade's first stage: the run folders whose label map it reads as extra channels.
    previous_stage: list[str] | None = None
    temperature: float = 1.0  # the logits of its averaged probabilities divided by it (segnet.inference.temperature)

    @classmethod
    def of(cls, models: list[TrainedModel], temperature: float | Mapping[str, float] = 1.0) -> Configuration:
        settings = models[0].settings
        stage = settings.previous_stage
        return cls(models, settings.spatial_dims, settings.geometry.loading(), None if stage is None else list(stage),
                   configuration_temperature(temperature, settings.configuration))

    def plan(self) -> dict[str, Any]:
        return {"spatial_dims": self.spatial_dims, **self.geometry,
                **({"previous_stage": self.previous_stage} if self.previous_stage else {})}


class Predictor:
    """Class probabilities of one image from one model or the mean of several, by configuration."""

    def __init__(self, models: list[TrainedModel], tta: bool = False, uncertainty: bool = False,
                 temperature: float | Mapping[str, float] = 1.0):
        first = models[0].settings
        for model in models[1:]:
            for key, value in model.settings.shared().items():
                if value != first.shared()[key]:
                    raise ConfigError(
                        f"the checkpoints of an ensemble must agree on data.{key}: {first.shared()[key]} vs "
                        f"{value}; ensemble models trained on the same dataset's channels and classes "
                        "(their plans may differ: each predicts in its own)"
                    )
        by_plan: dict[str, list[TrainedModel]] = {}
        for model in models:
            by_plan.setdefault(model.settings.plan_key(), []).append(model)
        self.configurations = [Configuration.of(members, temperature) for members in by_plan.values()]
        self.models = models
        self.tta = tta
        # with the probabilities, one more channel: the members' mutual information (segnet.inference.uncertainty)
        self.uncertainty = uncertainty
        self.class_names = list(first.class_names)
        self.in_channels = first.in_channels
        self.ignore_label = first.ignore_label
        self.regions = Regions.from_settings(first.regions)
        stages = {json.dumps(c.previous_stage) for c in self.configurations if c.previous_stage}
        if len(stages) > 1:
            raise ConfigError(f"the cascades of an ensemble read different first stages ({', '.join(sorted(stages))}); "
                              "ensemble cascade models trained on the same 3d_lowres runs")
        self.previous_stage = json.loads(stages.pop()) if stages else None

    @torch.no_grad()
    def probabilities(self, image: torch.Tensor, configuration: Configuration) -> torch.Tensor:
        """(classes, *spatial) float32, for one image loaded by `configuration`'s plan (C, *spatial),
        its models' mean, tempered by the configuration's temperature; (regions, *spatial) for
        region-based labels; with uncertainty, the members' mutual information after them. On the
        models' device (the host's where the image did not fit there), where it is mapped back to
        the image's grid."""
        total = None
        # The model's own spatial axes: a 2D model on a volume predicts slice by slice along the
        # last axis, so flipping that axis would change nothing.
        axes = range(2, 2 + configuration.spatial_dims)
        for model in configuration.models:
            batch = plain(image)[None].to(model.device)
            run = functools.partial(self.model_probabilities, model, batch, axes)
            p = on_device_or_host(run, model.device, tuple(batch.shape[2:])).float()[0]
            total = p if total is None else total + p.to(total.device)
        mean = total / len(configuration.models)
        regions = self.regions is not None
        if not self.uncertainty:
            return tempered(mean, configuration.temperature, regions)
        return torch.cat([tempered(mean[:-1], configuration.temperature, regions),
                          disagreement(mean, regions)[None]])

    def model_probabilities(self, model: TrainedModel, batch: torch.Tensor, axes: range,
                            output_device: torch.device | None) -> torch.Tensor:
        """One model's probabilities of a batch on its device, mirrored when self.tta, the whole
        image accumulated on `output_device` (None: the model's device)."""
        def predict(x: torch.Tensor) -> torch.Tensor:
            return model.predict_logits(x, output_device)

        regions = self.regions is not None
        with training_autocast(model.precision, model.device):
            if self.uncertainty:  # each member's entropy as well as their mean
                members = flipped_probabilities(predict, batch, axes, regions) if self.tta else [
                    probabilities_of(predict(batch), regions)]
                return with_member_entropy((p.float() for p in members), regions)
            if self.tta:
                return predict_with_flips(predict, batch, axes, regions)
            return probabilities_of(predict(batch), regions)

    def label_map(self, probabilities: np.ndarray) -> np.ndarray:
        return label_map_of(probabilities, self.regions)
