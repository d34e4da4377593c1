"""Checkpoints as segnet's training writes them (the network's weights under net., the run's
settings as hyper_parameters), written directly: loading, evaluating or fine-tuning from one
needs no training. And datasets that name their channels or classes otherwise."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from helpers.data import CLASS_NAMES
from segnet.data.normalization import scheme_of
from segnet.model.network import build_network

# A tiny 3D EdgeUNet's settings, as conf/model/edge_unet.yaml gives them with model.channels=[8,16]
# and model.strides=[2] on a one-channel dataset of three classes.
MODEL_3D = {"spatial_dims": 3, "in_channels": 1, "out_channels": 3, "channels": [8, 16], "strides": [2],
            "num_res_units": 1, "encoder_blocks": None, "norm": "instance", "act": "prelu", "dropout": 0.0,
            "edge_placement": ["input", "skips"], "edge_alpha_init": 0.1, "edge_alpha_trainable": True,
            "skip_layer": "edge", "deep_supervision": False, "init_from": None}


def run_data(class_names: Sequence[str] = CLASS_NAMES, channels: Sequence[str] = ("MRI",),
             spacing: Sequence[float] = (1.0, 1.0, 1.0), orientation: str = "RAS",
             normalization: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A 3D run's data settings on a dataset folder, with the plan training puts in them (a CT
    channel's normalization needs its statistics given)."""
    normalization = normalization or [{"channel": name, "scheme": scheme_of(name), "nonzero": True}
                                      for name in channels]
    plan = {"orientation": orientation, "slicing_axis": orientation[-1], "target_spacing": list(spacing),
            "normalization": normalization,
            "configurations": {"2d": {"spacing": [*spacing[:2], 0.0]}, "3d": {"spacing": list(spacing)}}}
    return {"spatial_dims": 3, "in_channels": len(channels), "num_classes": len(class_names),
            "class_names": list(class_names), "ignore_label": None, "normalization": normalization,
            "orientation": orientation, "spacing": list(spacing), "fold": 0, "num_folds": 2, "split_seed": 12345,
            "plan": plan}


def write_checkpoint(path: Path, model: dict[str, Any], data: dict[str, Any], seed: int = 1) -> dict[str, torch.Tensor]:
    """A checkpoint of a network of `model`'s settings, initialized from `seed`, trained on `data`;
    its network's weights."""
    torch.manual_seed(seed)
    state = build_network(model, "python").state_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    hyper_parameters = {"model": model, "data": data,
                        "inference": {"roi_size": [16] * model["spatial_dims"], "sw_batch_size": 4, "overlap": 0.5}}
    torch.save({"state_dict": {f"net.{name}": value for name, value in state.items()},
                "hyper_parameters": hyper_parameters, "epoch": 3}, path)
    return state


def rename_in_dataset_json(root: Path, classes: Sequence[str] | None = None,
                           channels: Sequence[str] | None = None) -> Path:
    """A Decathlon dataset whose dataset.json names its labels `classes` (by value) and its
    channels `channels`, the files unchanged."""
    spec = json.loads((root / "dataset.json").read_text())
    if classes is not None:
        spec["labels"] = {str(value): name for value, name in enumerate(classes)}
    if channels is not None:
        spec["modality"] = {str(c): name for c, name in enumerate(channels)}
    (root / "dataset.json").write_text(json.dumps(spec, indent=2))
    return root
