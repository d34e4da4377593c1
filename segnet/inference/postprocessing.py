"""Postprocessing rules, as segnet-postprocess decides them on the cross-validation (nnU-Net's
"keep the largest connected component"): of the foreground as a whole, then of each class
listed, every other component set to background. A run folder's postprocessing.json holds
them; prediction and evaluation apply them to every label map (postprocessing=auto finds the
file beside the checkpoint's run)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy import ndimage

from segnet.errors import ConfigError
from segnet.metrics import dice_per_class, drop_ignored

FILE = "postprocessing.json"


@dataclass(frozen=True)
class Rules:
    foreground: bool = False  # the largest component of all foreground classes together
    classes: tuple[int, ...] = ()  # then the largest component of each of these classes alone

    def apply(self, label_map: np.ndarray) -> np.ndarray:
        if self.foreground:
            label_map = largest_component(label_map, None)
        for label in self.classes:
            label_map = largest_component(label_map, [label])
        return label_map

    def to_json(self) -> dict:
        return {"foreground_largest_component": self.foreground, "classes_largest_component": list(self.classes)}


NONE = Rules()


def largest_component(label_map: np.ndarray, labels: list[int] | None) -> np.ndarray:
    """`label_map` with only the largest connected component of `labels` (None: all foreground
    classes as one) left, neighbours across edges and corners counted (scipy.ndimage.label);
    the voxels of the others become background."""
    mask = label_map > 0 if labels is None else np.isin(label_map, labels)
    components, count = ndimage.label(mask, structure=ndimage.generate_binary_structure(mask.ndim, mask.ndim))
    if count < 2:
        return label_map
    largest = 1 + int(np.argmax(np.bincount(components.ravel())[1:]))
    return np.where(mask & (components != largest), 0, label_map).astype(label_map.dtype)


TRIALS = ("none", "foreground", "classes", "foreground and classes")


def case_scores(prediction: np.ndarray, reference: np.ndarray, num_classes: int,
                ignore_label: int | None = None) -> dict[str, list[float]]:
    """A case's Dice per foreground class under each trial of TRIALS."""
    every_class = Rules(classes=tuple(range(1, num_classes)))
    foreground = Rules(foreground=True).apply(prediction)
    maps = (prediction, foreground, every_class.apply(prediction), every_class.apply(foreground))
    scores = {}
    for name, label_map in zip(TRIALS, maps, strict=True):
        kept, known, _ = drop_ignored(label_map.astype(np.int64), reference.astype(np.int64), ignore_label)
        scores[name] = dice_per_class(torch.from_numpy(kept), torch.from_numpy(known), num_classes)
    return scores


def read_rules(path: Path) -> Rules:
    try:
        found = json.loads(path.read_text())
        classes = tuple(int(c) for c in found["classes_largest_component"])
        return Rules(bool(found["foreground_largest_component"]), classes)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{path} is not a postprocessing file of segnet-postprocess ({error}); write it again "
                          "with segnet-postprocess, or predict with postprocessing=none") from None


def rules_for(given: str | None, folders: list[Path]) -> Rules:
    """The rules a command applies: postprocessing=none, a file, or auto: the one in the models'
    folders (a checkpoint's run folder, an export's own), the same for every model of an
    ensemble."""
    if given in (None, "none"):
        return NONE
    if given != "auto":
        return read_rules(Path(given))
    found = {read_rules(folder / FILE) if (folder / FILE).is_file() else NONE for folder in folders} or {NONE}
    if len(found) > 1:
        raise ConfigError("the checkpoints' run folders hold different postprocessing.json (or only some do): "
                          "decide one for the ensemble with segnet-postprocess, or give postprocessing=PATH or none")
    return found.pop()
