"""Prediction on images, shared by segnet-predict and evaluation (which adds the scores).

One checkpoint or several (an ensemble, e.g. the five folds: their softmax averaged, or for
region-based labels their sigmoids, turned into a label map by the regions' class order), flip
test-time augmentation over the model's own spatial axes, under the autocast the model trained
with. Each image is loaded as in training (the plan stored in the checkpoint: orientation, the
crop to the anatomy, spacing, normalization), predicted whole, and mapped back to its own voxel
grid and affine by inverting the loading transforms: the label map (uint8, in the image's format:
a NIfTI with the image's affine, a PNG of the image's size; see segnet.data.image_files) and, on
request, the class probabilities (.npz; outside the crop's box, background).

An ensemble's models may come from several configurations (plans: a 2D and a 3D model, another
spacing), as nnU-Net ensembles its configurations: the models of one configuration are averaged
on its grid, and the configurations' probabilities, each mapped back to the image's grid, are
averaged there with equal weights (five folds of one configuration count as one). A cascade's
configuration also loads each case's first-stage label map (segnet.inference.previous_stage says
whose), onto its grid as a label, and reads it as one-hot channels after the image's.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from monai.data import MetaTensor
from monai.transforms import Invertd

from segnet.data.cascade_input import network_input, one_hot, previous_values
from segnet.data.dataset_json import Case, image_stem
from segnet.data.derived import digest, file_digest
from segnet.data.formats import IMAGE_ENDINGS
from segnet.data.image_files import file_channels, label_ending, read_stamp, write_label
from segnet.data.regions import Regions, output_names
from segnet.data.samples import PREVIOUS
from segnet.data.transforms import case_dicts, eval_transforms, load_case
from segnet.errors import ConfigError, DatasetError
from segnet.files import atomic_path
from segnet.inference.component_rules import NONE, Rules
from segnet.inference.trained_model import TrainedModel
from segnet.inference.windows import (
    on_device_or_host,
    plain,
    predict_with_flips,
    probabilities_of,
    training_autocast,
)

log = logging.getLogger(__name__)
CHANNEL_FILE = re.compile(r"^(?P<case>.+)_(?P<channel>\d{4})$")


def find_cases(source: Path, in_channels: int) -> list[Case]:
    """The images under `source` (a folder, or one file), grouped into cases: nnU-Net's channel
    naming `{case}_0000.nii.gz`, `{case}_0001.nii.gz`, ... (a file holding several channels, an RGB
    PNG say, counts them all) or, for one-channel models, any image files, one case each. A
    one-channel model reads the names as nnU-Net's only where every file ends in _0000: in a folder
    of frame_0000.png, frame_0001.png, ... each file is a case of its own."""
    if not source.exists():
        raise ConfigError(f"input={source} does not exist; point it at a folder of images or one image file")
    files = [source] if source.is_file() else sorted(source.iterdir())
    if source.is_file() and in_channels > 1:  # the case's other channels lie beside it
        match = CHANNEL_FILE.match(image_stem(source) or "")
        files = sorted(p for p in source.parent.iterdir()
                       if match and (image_stem(p) or "").startswith(match["case"] + "_"))
    skipped = [p.name for p in files if image_stem(p) is None]
    if skipped:  # sidecar files (.json, notes), hidden files, sub-folders
        log.info("input=%s: skipping %d entries that are not images: %s", source, len(skipped), ", ".join(skipped[:5]))
    files = [p for p in files if image_stem(p) is not None]
    if not files:
        raise ConfigError(f"input={source} holds no images ({', '.join(IMAGE_ENDINGS)})")
    matches = [CHANNEL_FILE.match(image_stem(path)) for path in files]
    by_channel = in_channels > 1 or all(match and match["channel"] == "0000" for match in matches)
    channels: dict[str, dict[int, Path]] = {}
    for path, match in zip(files, matches, strict=True):
        name, channel = (match["case"], int(match["channel"])) if by_channel and match else (image_stem(path), 0)
        if channel in channels.setdefault(name, {}):
            raise DatasetError(f"{channels[name][channel]} and {path} are both case {name}'s channel {channel}: keep "
                               "one of them in the input folder")
        channels[name][channel] = path
    return [Case(name, tuple(map(str, channel_files(name, found, in_channels, source))), None)
            for name, found in sorted(channels.items())]


def channel_files(name: str, found: dict[int, Path], in_channels: int, source: Path) -> list[Path]:
    """A case's files in channel order, once they hold the model's channels: a file per channel
    (no header read), or files holding several (an RGB PNG), counted."""
    files = [found[channel] for channel in sorted(found)]
    fix = (f"name them {name}_0000 .. {name}_{in_channels - 1:04d}, one channel each, or give one file holding "
           f"all {in_channels}")
    if sorted(found) != list(range(len(found))):
        raise DatasetError(f"case {name} in {source} has channel files numbered {sorted(found)}, not 0 to "
                           f"{len(found) - 1}, and the model takes {in_channels} channel(s): {fix}")
    held = len(files) if len(files) == in_channels else sum(file_channels(path) for path in files)
    if held != in_channels:
        raise DatasetError(f"case {name} in {source}: {', '.join(p.name for p in files)} hold {held} channel(s) but "
                           f"the model takes {in_channels}: {fix}")
    return files


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

    @classmethod
    def of(cls, models: list[TrainedModel]) -> Configuration:
        settings = models[0].settings
        stage = settings.previous_stage
        return cls(models, settings.spatial_dims, settings.geometry.loading(), None if stage is None else list(stage))

    def plan(self) -> dict[str, Any]:
        return {"spatial_dims": self.spatial_dims, **self.geometry,
                **({"previous_stage": self.previous_stage} if self.previous_stage else {})}


class Predictor:
    """Class probabilities of one image from one model or the mean of several, by configuration."""

    def __init__(self, models: list[TrainedModel], tta: bool = False):
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
        self.configurations = [Configuration.of(members) for members in by_plan.values()]
        self.models = models
        self.tta = tta
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
        its models' mean; (regions, *spatial) for region-based labels. On the models' device (the
        host's where the image did not fit there), where it is mapped back to the image's grid."""
        total = None
        # The model's own spatial axes: a 2D model on a volume predicts slice by slice along the
        # last axis, so flipping that axis would change nothing.
        axes = range(2, 2 + configuration.spatial_dims)
        for model in configuration.models:
            batch = plain(image)[None].to(model.device)
            run = functools.partial(self.model_probabilities, model, batch, axes)
            p = on_device_or_host(run, model.device, tuple(batch.shape[2:])).float()[0]
            total = p if total is None else total + p.to(total.device)
        return total / len(configuration.models)

    def model_probabilities(self, model: TrainedModel, batch: torch.Tensor, axes: range,
                            output_device: torch.device | None) -> torch.Tensor:
        """One model's probabilities of a batch on its device, mirrored when self.tta, the whole
        image accumulated on `output_device` (None: the model's device)."""
        def predict(x: torch.Tensor) -> torch.Tensor:
            return model.predict_logits(x, output_device)

        regions = self.regions is not None
        with training_autocast(model.precision, model.device):
            if self.tta:
                return predict_with_flips(predict, batch, axes, regions)
            return probabilities_of(predict(batch), regions)

    def label_map(self, probabilities: np.ndarray) -> np.ndarray:
        return label_map_of(probabilities, self.regions)



@dataclass
class Prediction:
    case: Case
    label_map: np.ndarray  # on the image's own grid
    file: Path
    unprocessed: np.ndarray  # the label map before the postprocessing rules


@dataclass
class CaseLoader:
    """Each configuration's loading chain and nothing else (no model): what a loader worker
    (segnet.inference.pipeline) is sent. A cascade's chain also loads the case's first-stage
    label map (`previous`: {case name: file}) as a label, one-hot by `values` (PREVIOUS)."""
    loads: list
    cascades: list[bool]
    previous: dict[str, Path]
    values: list[int]

    def __call__(self, case: Case) -> list[dict]:
        """The case's image as each configuration's plan loads it."""
        image = case_dicts([case])[0]["image"]
        loaded = []
        for load, cascade in zip(self.loads, self.cascades, strict=True):
            if not cascade:
                loaded.append(load_case(load, {"image": image}))
                continue
            item = load_case(load, {"image": image, "label": str(self.previous[case.name])})
            label = item.pop("label")
            item[PREVIOUS] = torch.from_numpy(one_hot(label.numpy(), self.values))
            loaded.append(item)
        return loaded


class PredictionWriter:
    """Loads a case, predicts it, maps the result back to the image's grid and writes it, with
    `stamp` (the model) and the digest of the case's image files in the label map's header, so
    that a label map is reused only for the very image it was made from, whatever its name: load,
    infer and finish, which segnet.inference.pipeline runs in three places at once."""

    def __init__(self, predictor: Predictor, output_dir: Path, save_probabilities: bool = False,
                 rules: Rules = NONE, stamp: str = "", previous: dict[str, Path] | None = None):
        self.predictor = predictor
        self.rules = rules
        self.stamp = stamp
        self.output_dir = output_dir
        self.save_probabilities = save_probabilities
        cascades = [c.previous_stage is not None for c in predictor.configurations]
        if any(cascades) and previous is None:
            raise ValueError("a cascade predicts from its first stage's label maps: pass `previous`")
        self.loads = [eval_transforms(with_label=cascade, **c.geometry)
                      for c, cascade in zip(predictor.configurations, cascades, strict=True)]
        values = previous_values(len(predictor.class_names), predictor.regions)
        self.load = CaseLoader(self.loads, cascades, dict(previous or {}), values)
        # Back to the image's voxel grid: undo the loading transforms (spacing, crop, orientation) on
        # the class probabilities, interpolated linearly, and take the label map there, as
        # nnU-Net does: resampling a label map by nearest neighbour would make every boundary
        # of an upsampled prediction a staircase.
        self.restores = [Invertd(keys="prob", transform=load, orig_keys="image", nearest_interp=False)
                         for load in self.loads]

    def predict(self, image: torch.Tensor, configuration: Configuration) -> torch.Tensor:
        """Probabilities (classes, *spatial) of one image loaded by `configuration`'s plan."""
        return self.predictor.probabilities(image, configuration)

    def infer(self, loaded: list[dict]) -> list[torch.Tensor]:
        """Each configuration's probabilities on its own grid: the network's part."""
        return [self.predict(network_input(item, 0), configuration)
                for item, configuration in zip(loaded, self.predictor.configurations, strict=True)]

    def restored_probabilities(self, loaded: list[dict], probabilities: list[torch.Tensor]) -> np.ndarray:
        """The case's probabilities on its image's grid: each configuration's, mapped back, averaged."""
        total = None
        for item, inferred, restore in zip(loaded, probabilities, self.restores, strict=True):
            # on the device the network ran on, as nnU-Net's predictor resamples on the GPU; on the
            # host where the image's grid does not fit there
            run = functools.partial(self.restored_on, restore, item, inferred)
            restored = on_device_or_host(run, inferred.device, tuple(inferred.shape[1:]))
            total = restored if total is None else total + restored.to(total.device)
        mean = total / len(self.predictor.configurations)
        if self.predictor.regions is None:
            # Undoing the crop to the anatomy pads every channel with zeros; softmax probabilities
            # stay a distribution, so what lies outside the box is background (as nnU-Net fills it)
            mean[0] += 1 - mean.sum(0)
        return mean.cpu().numpy()

    @staticmethod
    def restored_on(restore: Invertd, item: dict, inferred: torch.Tensor, device: torch.device | None) -> torch.Tensor:
        """One configuration's probabilities mapped back onto the image's grid, on `device` (None:
        where they are)."""
        meta = {"meta": item["image"].meta, "applied_operations": item["image"].applied_operations}
        prob = MetaTensor(inferred if device is None else inferred.to(device), **meta)
        return restore({**item, "prob": prob})["prob"].as_tensor().float()

    def finish(self, case: Case, loaded: list[dict], probabilities: list[torch.Tensor]) -> Prediction:
        """Back onto the image's grid, labelled, postprocessed and written (what the writer does)."""
        restored = self.restored_probabilities(loaded, probabilities)
        unprocessed = self.predictor.label_map(restored)
        label_map = self.rules.apply(unprocessed)
        if self.save_probabilities:
            channels = output_names(self.predictor.class_names, self.predictor.regions)
            with atomic_path(self.probabilities_path(case)) as temporary:
                np.savez_compressed(temporary, probabilities=restored, class_names=np.array(channels))
        path = self.label_path(case)  # last: a case is complete when its label map exists
        with atomic_path(path) as temporary:
            write_label(label_map, case.images[0], temporary, self.case_stamp(case))
        return Prediction(case, label_map, path, unprocessed)

    def run_case(self, case: Case) -> Prediction:
        loaded = self.load(case)
        return self.finish(case, loaded, self.infer(loaded))

    def label_path(self, case: Case) -> Path:
        return self.output_dir / f"{case.name}{label_ending(case.images[0])}"

    def probabilities_path(self, case: Case) -> Path:
        return self.output_dir / f"{case.name}.npz"

    def case_stamp(self, case: Case) -> str:
        """The stamp of this model's label map of this case's image files, as they are now."""
        return f"{self.stamp} image {images_digest(case)}"

    def is_done(self, case: Case) -> bool:
        """Whether an earlier run of this model wrote this case whole, from the same image files,
        the probabilities too where they are asked for: every file is written whole, the label map
        last, with the stamp."""
        path = self.label_path(case)
        asked = not self.save_probabilities or self.probabilities_path(case).is_file()
        return asked and path.is_file() and read_stamp(path) == self.case_stamp(case)


def images_digest(case: Case) -> str:
    """A digest of the content of a case's image files (16 hex digits: a stamp fits a NIfTI
    header's 80 characters)."""
    return digest([file_digest(path) for path in case.images], 16)
