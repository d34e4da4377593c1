"""OmegaConf resolvers used by conf/: ${dataset:ROOT,FIELD} reads a dataset folder's
dataset.json, so channel and class counts are never typed twice."""

from __future__ import annotations

from omegaconf import OmegaConf

from .data.dataset_json import describe_dataset


def _dataset_field(root: str, field: str):
    value = getattr(describe_dataset(str(root)), field)
    return list(value) if isinstance(value, tuple) else value


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("dataset"):
        OmegaConf.register_new_resolver("dataset", _dataset_field)
