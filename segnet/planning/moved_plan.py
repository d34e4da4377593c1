"""A plan moved from another run onto this dataset's (model.init_from), as nnU-Net moves plans
between datasets (nnUNetv2_move_plans_between_datasets): the patch and batch stay this dataset's,
the grid (orientation, slicing axis, each configuration's spacing) is the source run's, and so is
its normalization (a CT channel's statistics included) where both normalize alike, so that the
network sees inputs on the grid and the intensity scale its weights learnt."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig

from segnet.checkpoints.settings import RunSettings
from segnet.planning.plan import apply_plan, configuration_name, shown_spacing

log = logging.getLogger(__name__)
GEOMETRY = ("orientation", "slicing_axis", "target_spacing")  # the plan's grid, with each configuration's spacing


def moved_plan(plan: dict[str, Any], source: RunSettings, source_path: str, same_scale: bool) -> dict[str, Any]:
    """This dataset's plan with the source run's grid, and with its normalization under this
    dataset's channel names where `same_scale` (the same scheme per channel)."""
    moved = source.plan
    normalization = [{**entry, "channel": own["channel"]}
                     for entry, own in zip(source.geometry.normalization, plan["normalization"], strict=True)]
    return {**plan, **{key: moved[key] for key in GEOMETRY}, "carried_from": source_path,
            "configurations": {name: {**configuration, "spacing": moved["configurations"][name]["spacing"]}
                               for name, configuration in plan["configurations"].items()
                               if name in moved["configurations"]},
            "normalization": normalization if same_scale else plan["normalization"]}


def apply_moved_plan(data: DictConfig, model: DictConfig, plan: dict[str, Any], source: RunSettings,
                     source_path: str, same_scale: bool) -> dict[str, Any]:
    """The moved plan (moved_plan), applied to this run's data section as apply_plan applies a
    plan; its patch and batch are set already, and stay."""
    carried = moved_plan(plan, source, source_path, same_scale)
    apply_plan(data, model, carried)
    if same_scale:  # apply_plan keeps the normalization already set (the dataset's, or one given with the same
        data.normalization = carried["normalization"]  # schemes): the source's statistics replace it
    name = configuration_name(data)
    log.info("model.init_from=%s: planned with its run's orientation %s and spacing %s, and %s normalization (this "
             "dataset's own plan: %s, %s)", source_path, carried["orientation"],
             shown_spacing(carried["configurations"][name]["spacing"]), "its" if same_scale else "this dataset's",
             plan["orientation"], shown_spacing(plan["configurations"][name]["spacing"]))
    return carried
