"""The channel and class names a run trained with, and the check that a dataset names them alike:
the same names in the same order. Equal counts are not enough: on a dataset that numbers its
classes in another order, every score would be reported under another class's name, and a channel
of another modality would be fed to weights that learnt a different one. segnet-evaluate,
segnet-postprocess and fine-tuning (model.init_from) all check with check_same_names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from segnet.data.dataset_json import DatasetDescription
from segnet.errors import ConfigError

KINDS = ("channels", "classes")


@dataclass(frozen=True)
class Names:
    channels: tuple[str, ...] | None  # None: generated data, whose channels have no names
    classes: tuple[str, ...]  # index = label value, background first
    source: str  # where they were read, for messages: a dataset.json, a checkpoint


def run_names(data: Mapping[str, Any], source: str) -> Names:
    """The names of a run's data settings (a checkpoint's, or a run's being set up): its classes,
    and its channels as its plan lists them (dataset.json's); a run on generated data has no plan."""
    plan = data.get("plan")
    channels = tuple(entry["channel"] for entry in plan["normalization"]) if plan else None
    return Names(channels, tuple(data["class_names"]), source)


def dataset_names(description: DatasetDescription) -> Names:
    return Names(description.channel_names, description.class_names, str(description.root / "dataset.json"))


def shown(names: tuple[str, ...] | None) -> str:
    return str(list(names)) if names is not None else "none (generated data)"


def check_same_names(trained: Names, given: Names, advice: str, kinds: Sequence[str] = KINDS) -> None:
    """A ConfigError with both lists of each kind (channels, classes) whose names differ, in names
    or in order, between what a run trained with and what it is given; `advice` says what to do."""
    differing = [f"{kind} {shown(getattr(given, kind))} in {given.source} but {shown(getattr(trained, kind))} in "
                 f"{trained.source}" for kind in kinds if getattr(given, kind) != getattr(trained, kind)]
    if differing:
        raise ConfigError("; ".join(differing) + f" (the same names in the same order are needed): {advice}")
