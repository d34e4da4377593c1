"""Postprocessing rules, as segnet-postprocess decides them on the cross-validation (nnU-Net's
"keep the largest connected component"): of the foreground as a whole, then of each class
listed, or, with region-based labels, of each region listed in turn (its label values together),
every other component set to background. A run folder's postprocessing.json holds them;
prediction and evaluation apply them to every label map (postprocessing=auto finds the file
beside the checkpoint's run)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy import ndimage

from segnet.data.regions import Regions, foreground_units
from segnet.errors import ConfigError
from segnet.metrics import dice_per_class, drop_ignored

FILE = "postprocessing.json"


@dataclass(frozen=True)
class Rules:
    foreground: bool = False  # the largest component of all foreground classes together
    classes: tuple[int, ...] = ()  # then the largest component of each of these classes alone
    regions: tuple[tuple[int, ...], ...] = ()  # or of each of these regions (its label values), in this order

    def apply(self, label_map: np.ndarray) -> np.ndarray:
        if self.foreground:
            label_map = largest_component(label_map, None)
        for label in self.classes:
            label_map = largest_component(label_map, [label])
        for values in self.regions:
            label_map = largest_component(label_map, list(values))
        return label_map

    def to_json(self) -> dict:
        return {"foreground_largest_component": self.foreground, "classes_largest_component": list(self.classes),
                "regions_largest_component": [list(values) for values in self.regions]}


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


def unit_dice(label_map: np.ndarray, reference: np.ndarray, units: Sequence[Sequence[int]],
              ignore_label: int | None = None) -> list[float]:
    """Dice of each foreground unit (a class, or a region's values) of a label map, the reference's
    ignored voxels left out."""
    kept, known, _ = drop_ignored(label_map.astype(np.int64), reference.astype(np.int64), ignore_label)
    return dice_per_class(torch.from_numpy(kept), torch.from_numpy(known), units)


def case_scores(prediction: np.ndarray, reference: np.ndarray, num_classes: int, ignore_label: int | None = None,
                regions: Regions | None = None) -> dict[str, list[float]]:
    """A case's Dice per foreground class under each trial of TRIALS; with regions, per region
    under the first two (a region's rule is tried on top of those kept before it:
    segnet.postprocessing.decide)."""
    units = foreground_units(num_classes, regions)
    foreground = Rules(foreground=True).apply(prediction)
    if regions is not None:
        return {name: unit_dice(label_map, reference, units, ignore_label)
                for name, label_map in zip(TRIALS[:2], (prediction, foreground), strict=True)}
    every_class = Rules(classes=tuple(range(1, num_classes)))
    maps = (prediction, foreground, every_class.apply(prediction), every_class.apply(foreground))
    return {name: unit_dice(label_map, reference, units, ignore_label)
            for name, label_map in zip(TRIALS, maps, strict=True)}


def read_rules(path: Path) -> Rules:
    try:
        found = json.loads(path.read_text())
        classes = tuple(int(c) for c in found["classes_largest_component"])
        regions = tuple(tuple(int(v) for v in values) for values in found.get("regions_largest_component", []))
        return Rules(bool(found["foreground_largest_component"]), classes, regions)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{path} is not a postprocessing file of segnet-postprocess ({error}); write it again "
                          "with segnet-postprocess, or predict with postprocessing=none") from None


def rules_for(given: str | None, folders: Sequence[Path]) -> Rules:
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


def rules_files(given: str | None, folders: Sequence[Path]) -> list[Path]:
    """The postprocessing.json files postprocessing=`given` reads (rules_for)."""
    if given == "auto":
        return [path for path in (folder / FILE for folder in folders) if path.is_file()]
    return [] if given in (None, "none") else [Path(given)]


def rules_origin(files: list[Path], cases: list[str]) -> dict:
    """Where rules read from `files` were decided (segnet-postprocess's runs and cases), and whether
    a score of `cases` under them is optimistic: rules chosen on the very cases they are scored on
    (the cross-validation's) raise that score by their choice alone. None: a file that does not
    name its cases (one written by hand, given as postprocessing=FILE) leaves it unknown."""
    decided = [json.loads(path.read_text()).get("decided_on", {}) for path in files]
    chosen_on = {name for record in decided for name in record.get("case_names", [])}
    unnamed = [str(path) for path, record in zip(files, decided, strict=True) if "case_names" not in record]
    overlap = chosen_on & set(cases)
    if overlap:
        optimistic, why = True, f"the rules were chosen on {len(overlap)} of the {len(cases)} cases scored here"
    elif unnamed:
        optimistic, why = None, f"{', '.join(unnamed)} does not name the cases its rules were chosen on"
    else:
        optimistic, why = False, "the rules were chosen on other cases" if files else "no rules applied"
    return {"files": [str(path.resolve()) for path in files],
            "decided_on_runs": sorted({run for record in decided for run in record.get("runs", [])}),
            "decided_on_cases": sorted(chosen_on), "optimistic": optimistic, "why": why}
