"""segnet.load_model: a trained model in a Python program, predicting what segnet-predict predicts.

The model is named as segnet-predict names it (segnet.inference.prediction_arguments) and loaded
by the same code; predict() runs one case through segnet-predict's PredictionWriter (the plan's
loading, the sliding window, flips, the mapping back onto the image's grid, postprocessing), so
the label maps are equal. An array is written to a temporary NIfTI file with its affine first:
the loading then sees the same file a user would give segnet-predict.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import nibabel as nib
import numpy as np
import torch
from omegaconf import OmegaConf

from segnet.checkpoints.paths import FINAL
from segnet.errors import ConfigError
from segnet.inference.component_rules import Rules, rules_for
from segnet.inference.ensemble import Predictor
from segnet.inference.input_cases import find_cases
from segnet.inference.predict import load_models
from segnet.inference.prediction_arguments import models_named
from segnet.inference.prediction_writer import PredictionWriter


class Model:
    """A loaded model (one, or an ensemble) and the postprocessing it predicts with."""

    def __init__(self, predictor: Predictor, rules: Rules):
        self.predictor, self.rules = predictor, rules

    @property
    def networks(self) -> list[torch.nn.Module | None]:
        """Each model's torch module; None for a network that is not one (an ONNX file, a package)."""
        return [model.net if isinstance(model.net, torch.nn.Module) else None for model in self.predictor.models]

    @property
    def network(self) -> torch.nn.Module | None:
        """The model's torch module (`networks` for an ensemble's)."""
        if len(self.networks) != 1:
            raise ValueError(f"this model is an ensemble of {len(self.networks)}: take model.networks")
        return self.networks[0]

    @property
    def class_names(self) -> list[str]:
        return list(self.predictor.class_names)

    def predict(self, image: str | Path | np.ndarray, spacing: tuple[float, ...] | None = None,
                affine: np.ndarray | None = None,
                probabilities: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """The label map (uint8) of an image file, or of an array (x, y, z), or (channels, x, y, z)
        for a model of several channels, with its voxel `spacing` (mm) or its `affine` (4 x 4,
        voxel to RAS+ world: the orientation too); with probabilities=True also the class
        probabilities (classes, *the label map's shape), as segnet-predict's save_probabilities."""
        with tempfile.TemporaryDirectory() as folder:
            folder = Path(folder)
            images = image if isinstance(image, str | Path) else written_array(image, spacing, affine, folder,
                                                                              self.predictor.in_channels)
            cases = find_cases(Path(images), self.predictor.in_channels)
            if len(cases) != 1:
                raise ValueError(f"predict: {image} holds {len(cases)} cases; give one image (segnet-predict "
                                 "predicts folders)")
            (case,) = cases
            writer = PredictionWriter(self.predictor, folder / "predicted", save_probabilities=probabilities,
                                      rules=self.rules)
            label_map = writer.run_case(case).label_map
            if not probabilities:
                return label_map
            return label_map, np.load(writer.probabilities_path(case))["probabilities"]


def written_array(image: np.ndarray, spacing, affine, folder: Path, channels: int) -> Path:
    """The array as NIfTI files in nnU-Net's naming (case_0000.nii.gz, one per channel) in
    `folder`, on the grid `affine` (or `spacing`, axis-aligned) says."""
    image = np.asarray(image)
    stacked = image[None] if channels == 1 else image
    if stacked.ndim != 4 or stacked.shape[0] != channels:
        raise ValueError(f"predict: an array of shape {image.shape} is no image for this model of {channels} "
                         f"channel(s): give (x, y, z){' or (channels, x, y, z)' if channels > 1 else ''}")
    if (spacing is None) == (affine is None):
        raise ValueError("predict: with an array give its spacing=(sx, sy, sz) or its affine= (4 x 4), one of them")
    affine = np.diag([*map(float, spacing), 1.0]) if affine is None else np.asarray(affine, dtype=float)
    if affine.shape != (4, 4):
        raise ValueError(f"predict: affine must be a 4 x 4 matrix, got shape {affine.shape}")
    cases = folder / "image"
    cases.mkdir()
    for channel, values in enumerate(stacked):
        nib.save(nib.Nifti1Image(np.asarray(values, dtype=np.float32), affine), cases / f"case_{channel:04d}.nii.gz")
    return cases


def load_model(path: str | Path, device: str = "auto", backend: str = "auto", tta: bool | None = None,
               folds: list[int] | None = None, postprocessing: str = "auto") -> Model:
    """A model as segnet-predict loads it: a training checkpoint (.ckpt), a run folder (its
    checkpoints/final.ckpt), segnet-export's .pt2 or .onnx, a model package (.zip), or an nnU-Net
    v2 trained model folder (`folds`); a list of them is an ensemble. `device`, `backend` (the op's),
    `tta` and `postprocessing` as segnet-predict's."""
    paths = [Path(p) for p in (path if isinstance(path, list | tuple) else [path])]
    paths = [p / "checkpoints" / FINAL if (p / "checkpoints").is_dir() else p for p in paths]
    key = "ckpt_path" if all(p.suffix == ".ckpt" for p in paths) else "exported"
    cfg = OmegaConf.create({key: [str(p) for p in paths], "folds": folds, "tta": tta})
    inputs = models_named(cfg)
    predictor = Predictor(load_models(inputs, device, backend), tta=inputs.tta)
    if predictor.previous_stage:
        raise ConfigError(f"{path} is a cascade, whose input includes its first stage's label maps: predict with "
                          "segnet-predict, which predicts the first stage first")
    return Model(predictor, rules_for(postprocessing, inputs.folders))
