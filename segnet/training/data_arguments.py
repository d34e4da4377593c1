"""The data section of a run's configuration as its data module's arguments.

conf/data/ holds the data module's settings and, in the same section, keys that other parts of a
run read: the dataset's description that the model and its checkpoint carry, planning's settings
(segnet.planning.plan.PLANNING_KEYS) and segnet-evaluate's split. Every other key is a typo or a
stale name, which a catch-all argument would swallow for a whole run: it stops the run, with the
nearest valid key."""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from segnet.errors import ConfigError
from segnet.planning.plan import PLANNING_KEYS

# What the model and its checkpoint read from the data section (SegmentationModule's `data`
# hyperparameters): the group's name, the dataset's channels, classes and regions, the thin classes scored
# for topology, the patch (the training crop and the sliding window).
READ_BY_THE_MODEL = frozenset({"name", "in_channels", "num_classes", "class_names", "ignore_label", "regions",
                               "topology_classes", "patch_size"})
READ_BY_EVALUATION = frozenset({"split"})  # the cases segnet-evaluate scores


def accepted_arguments(data: DictConfig) -> set[str]:
    """The names data._target_ takes, the derived maps aside (the loss decides those)."""
    parameters = inspect.signature(get_class(data._target_)).parameters.items()
    return {name for name, p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"maps"}


def check_data_keys(data: DictConfig) -> None:
    """A ConfigError naming a key of the data section that nothing reads, and the nearest one that
    something does."""
    known = accepted_arguments(data) | READ_BY_THE_MODEL | READ_BY_EVALUATION | PLANNING_KEYS
    name = data.get("name")
    for key in data.keys():
        if key != "_target_" and key not in known:
            nearest = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
            hint = f"Did you mean data.{nearest[0]}? " if nearest else ""
            raise ConfigError(
                f"data.{key}: nothing in segnet reads this key of data={name} (Hydra's +data.{key}=... adds a "
                f"key, it does not set one). {hint}conf/data/{name}.yaml lists the settings"
            )


def data_module_arguments(data: DictConfig) -> dict[str, Any]:
    """The resolved data section's entries that data._target_ takes as arguments (with
    check_data_keys passed: the rest is read by other parts of the run)."""
    accepted = accepted_arguments(data)
    values = OmegaConf.to_container(data, resolve=True)
    return {key: value for key, value in values.items() if key in accepted or key == "_target_"}
