"""One case from its files to its label map on disk, for segnet-predict and evaluation: each image
is loaded as in training (the plan stored in the checkpoint: orientation, the crop to the anatomy,
spacing, normalization), predicted whole (segnet.inference.ensemble), and mapped back to its own
voxel grid and affine by inverting the loading transforms: the label map (uint8, in the image's
format: a NIfTI with the image's affine, a PNG of the image's size; see segnet.data.image_files)
and, on request, the class probabilities (.npz; outside the crop's box, background). A cascade's
configuration also loads each case's first-stage label map (segnet.inference.previous_stage says
whose), onto its grid as a label, and reads it as one-hot channels after the image's.
"""

from __future__ import annotations

import functools
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from monai.data import MetaTensor
from monai.transforms import Invertd

from segnet.data.cascade_input import network_input, one_hot, previous_values
from segnet.data.dataset_json import Case
from segnet.data.derived import digest, file_digest
from segnet.data.image_files import label_ending, read_stamp, stored_files, write_label
from segnet.data.regions import foreground_units, output_names
from segnet.data.samples import PREVIOUS
from segnet.data.transforms import case_dicts, eval_transforms, load_case
from segnet.files import atomic_path
from segnet.inference.component_rules import NONE, Rules
from segnet.inference.ensemble import Configuration, Predictor
from segnet.inference.uncertainty import case_uncertainty, voxel_spacing, write_case
from segnet.inference.windows import (
    on_device_or_host,
)


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
                 rules: Rules = NONE, stamp: str = "", previous: dict[str, Path] | None = None,
                 output_format: str | None = None):
        self.predictor = predictor
        self.output_format = output_format  # None: each input's own format
        # a DICOM SEG's segments: each class's or region's name and label values
        self.segments = list(zip(predictor.class_names[1:],
                                 foreground_units(len(predictor.class_names), predictor.regions), strict=True))
        self.rules = rules
        self.stamp = stamp
        self.digests: dict[Case, str] = {}  # each case's image files hashed once per run (is_done, then finish)
        self.output_dir = output_dir
        self.save_probabilities = save_probabilities
        self.temperatures = np.array([c.temperature for c in predictor.configurations], np.float64)
        self.channels = len(output_names(predictor.class_names, predictor.regions))  # the probabilities'
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
            mean[0] += 1 - mean[:self.channels].sum(0)
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
        return self.write(case, self.restored_probabilities(loaded, probabilities))

    def write(self, case: Case, restored: np.ndarray) -> Prediction:
        """The case's probabilities on its image's grid labelled, postprocessed and written (and,
        with uncertainty, its maps: after the probabilities, the members' mutual information)."""
        restored, disagreement = restored[:self.channels], restored[self.channels:]
        unprocessed = self.predictor.label_map(restored)
        label_map = self.rules.apply(unprocessed)
        if self.save_probabilities:
            channels = output_names(self.predictor.class_names, self.predictor.regions)
            with atomic_path(self.probabilities_path(case)) as temporary:
                np.savez_compressed(temporary, probabilities=restored, class_names=np.array(channels),
                                    temperature=self.temperatures)
        if self.predictor.uncertainty:
            self.write_uncertainty(case, restored, disagreement[0], label_map)
        path = self.label_path(case)  # last: a case is complete when its label map exists
        with atomic_path(path) as temporary:
            write_label(label_map, case.images[0], temporary, self.case_stamp(case), self.segments)
        return Prediction(case, label_map, path, unprocessed)

    def run_case(self, case: Case) -> Prediction:
        loaded = self.load(case)
        return self.finish(case, loaded, self.infer(loaded))

    def write_uncertainty(self, case: Case, probabilities: np.ndarray, disagreement: np.ndarray,
                          label_map: np.ndarray) -> None:
        """<case>_uncertainty.npz: the case's uncertainty maps, score and uncertain volumes."""
        units = foreground_units(len(self.predictor.class_names), self.predictor.regions)
        voxel_mm3 = float(np.prod(voxel_spacing(case.images[0])))
        found = case_uncertainty(probabilities, disagreement, label_map, units, self.predictor.regions is not None,
                                 voxel_mm3)
        write_case(self.uncertainty_path(case), {**found, "temperature": self.temperatures},
                   self.predictor.class_names[1:])

    def uncertainty_path(self, case: Case) -> Path:
        return self.output_dir / f"{case.name}_uncertainty.npz"

    def label_path(self, case: Case) -> Path:
        return self.output_dir / f"{case.name}{label_ending(case.images[0], self.output_format)}"

    def probabilities_path(self, case: Case) -> Path:
        return self.output_dir / f"{case.name}.npz"

    def case_stamp(self, case: Case) -> str:
        """The stamp of this model's label map of this case's image files, as they are now."""
        if case not in self.digests:
            self.digests[case] = images_digest(case)
        return f"{self.stamp} image {self.digests[case]}"

    def is_done(self, case: Case) -> bool:
        """Whether an earlier run of this model wrote this case whole, from the same image files,
        the probabilities too where they are asked for: every file is written whole, the label map
        last, with the stamp."""
        path = self.label_path(case)
        asked = ((not self.save_probabilities or self.tempered_alike(self.probabilities_path(case)))
                 and (not self.predictor.uncertainty or self.tempered_alike(self.uncertainty_path(case))))
        return asked and path.is_file() and read_stamp(path) == self.case_stamp(case)

    def tempered_alike(self, path: Path) -> bool:
        """Whether `path` (a case's probabilities or uncertainty) exists and was tempered as this run
        tempers: a temperature changes them though not the label map, which the stamp is of."""
        try:
            with np.load(path) as saved:
                return "temperature" in saved and np.array_equal(saved["temperature"], self.temperatures)
        except (OSError, ValueError, zipfile.BadZipFile):
            return False


def images_digest(case: Case) -> str:
    """A digest of the content of a case's image files (16 hex digits: a stamp fits a NIfTI
    header's 80 characters)."""
    return digest([file_digest(file) for path in case.images for file in stored_files(path)], 16)
