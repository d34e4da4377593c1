"""The channel and class names a run trained with, and the check that a dataset names them alike:
the same names in the same order. Equal counts are not enough: on a dataset that numbers its
classes in another order, every score would be reported under another class's name, and a channel
of another modality would be fed to weights that learnt a different one. With region-based labels
the names are the regions', and a region is what its label values make it: the same names over
other values (BraTS 2021's enhancing tumour 4, nnU-Net's conversion's 3) would score every
prediction against another structure, so each region's values and the value it is written as
(regions_class_order) must match too. segnet-evaluate, segnet-postprocess and fine-tuning
(model.init_from) all check with check_same_names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from segnet.checkpoints.settings import RunSettings
from segnet.data.dataset_json import DatasetDescription
from segnet.data.regions import Regions
from segnet.errors import ConfigError

NAMED = ("channels", "classes")  # the kinds compared by their names
KINDS = (*NAMED, "regions")


@dataclass(frozen=True)
class Names:
    channels: tuple[str, ...] | None  # None: generated data, whose channels have no names
    classes: tuple[str, ...]  # index = label value, background first
    source: str  # where they were read, for messages: a dataset.json, a checkpoint
    regions: Regions | None = None  # region-based labels: the values of the regions classes[1:] name


def run_names(settings: RunSettings, source: str) -> Names:
    """The names of a run's settings (a checkpoint's, or a run's being set up): its classes (and
    regions), and its channels as its plan lists them (dataset.json's); a run on generated data
    has no plan."""
    return Names(settings.channel_names, settings.class_names, source, Regions.from_settings(settings.regions))


def dataset_names(description: DatasetDescription) -> Names:
    return Names(description.channel_names, description.class_names, str(description.root / "dataset.json"),
                 description.regions)


def shown(names: tuple[str, ...] | None) -> str:
    return str(list(names)) if names is not None else "none (generated data)"


def shown_regions(regions: Regions | None) -> str:
    if regions is None:
        return "none (a class per label value)"
    return f"{[list(values) for values in regions.values]} (regions_class_order {list(regions.class_order)})"


def region_differences(trained: Names, given: Names) -> list[str]:
    """Each region whose label values, or the value it is written as (regions_class_order), differ
    between what a run trained with and what it is given; both lists where the regions do not pair
    up (one side has none, or another number)."""
    if trained.regions == given.regions:
        return []
    if trained.regions is None or given.regions is None or len(trained.regions.values) != len(given.regions.values):
        return [f"regions {shown_regions(given.regions)} in {given.source} but {shown_regions(trained.regions)} in "
                f"{trained.source}"]
    differing = []
    for name, values, trained_values, order, trained_order in zip(
            given.classes[1:], given.regions.values, trained.regions.values, given.regions.class_order,
            trained.regions.class_order, strict=True):
        if values != trained_values:
            differing.append(f"region {name} covers label values {list(values)} in {given.source} but "
                             f"{list(trained_values)} in {trained.source}")
        if order != trained_order:
            differing.append(f"region {name} is written as label value {order} (regions_class_order) in "
                             f"{given.source} but {trained_order} in {trained.source}")
    return differing


def check_same_names(trained: Names, given: Names, advice: str, kinds: Sequence[str] = KINDS) -> None:
    """A ConfigError with both lists of each kind (channels, classes) whose names differ, in names
    or in order, between what a run trained with and what it is given, and each region whose
    values differ (regions); `advice` says what to do."""
    named = [f"{kind} {shown(getattr(given, kind))} in {given.source} but {shown(getattr(trained, kind))} in "
             f"{trained.source}" for kind in NAMED if kind in kinds and getattr(given, kind) != getattr(trained, kind)]
    regions = region_differences(trained, given) if "regions" in kinds else []
    problems = ([f"{'; '.join(named)} (the same names in the same order are needed)"] if named else []) + (
        [f"{'; '.join(regions)} (the same label values in each region are needed)"] if regions else [])
    if problems:
        raise ConfigError("; ".join(problems) + f": {advice}")
