"""nnU-Net's network of a plan, built as nnU-Net builds it (dynamic_network_architectures, the
`peer` extra), and called on segnet's axis order (segnet.nnunet.plans: nnU-Net's reversed).

The plan names the network's class and the torch modules it is made of as import paths; only
classes of dynamic_network_architectures and modules of torch.nn are imported from them, so a
plans.json cannot make segnet import anything else."""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from segnet.errors import ConfigError

NETWORKS = "dynamic_network_architectures.architectures."
MODULES = "torch.nn."


def located(name: str, allowed: str, where: Path) -> Any:
    """The class an import path in a plan names, where it lies under `allowed`."""
    module, _, attribute = name.rpartition(".")
    if not name.startswith(allowed) or not module:
        raise ConfigError(f"{where} names {name}; segnet builds nnU-Net's networks from classes under {allowed} only")
    try:
        return getattr(importlib.import_module(module), attribute)
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith("dynamic_network_architectures"):
            raise ConfigError("nnU-Net's models need dynamic_network_architectures: pip install "
                              "'segnet[peer]'") from None
        raise ConfigError(f"{where} names {name}, which cannot be imported ({error})") from None
    except AttributeError:
        raise ConfigError(f"{where} names {name}, which {module} does not have") from None


def build_nnunet_network(architecture: dict[str, Any], in_channels: int, outputs: int, deep_supervision: bool,
                         where: Path) -> nn.Module:
    """The network of a configuration's "architecture" (network_class_name, arch_kwargs and which
    of those are import paths), as nnU-Net's get_network_from_plans builds it."""
    if "network_class_name" not in architecture:
        raise ConfigError(f"{where} describes its network as nnU-Net before 2.4 did (UNet_class_name): open the "
                          "model once with nnU-Net >= 2.4 and save its plans, which converts them")
    network_class = located(architecture["network_class_name"], NETWORKS, where)
    kwargs = dict(architecture["arch_kwargs"])
    for key in architecture.get("_kw_requires_import", ()):
        if kwargs.get(key) is not None:
            kwargs[key] = located(kwargs[key], MODULES, where)
    network = network_class(input_channels=in_channels, num_classes=outputs, deep_supervision=deep_supervision,
                            **kwargs)
    if hasattr(network, "initialize"):
        network.apply(network.initialize)  # nnU-Net's initialization, as its trainer starts from
    return network


def total_stride(architecture: dict[str, Any]) -> list[int]:
    """The product of the stages' strides along each of nnU-Net's axes."""
    strides = architecture["arch_kwargs"]["strides"]
    dims = len(architecture["arch_kwargs"]["kernel_sizes"][0])
    per_stage = [[s] * dims if isinstance(s, int) else list(s) for s in strides]
    return [math.prod(stage[axis] for stage in per_stage) for axis in range(dims)]


class NnunetAxes(nn.Module):
    """nnU-Net's network on segnet's axis order (nnU-Net's reversed): the axes reversed on the way
    in and out, and an input smaller than the patch padded with zeros around it, as nnU-Net's
    predictor pads (also to a multiple of the network's stride, which whole slices need).

    With `deep_supervision`, training's forward returns the decoder's outputs, full resolution
    first, but the coarsest: nnU-Net's trainer weights that one 0 and halves the weight per level
    of the others, which segnet's deeply supervised loss does with the rest (segnet.model.dice_ce).
    In eval mode it returns the full-resolution logits alone. nnU-Net's decoder has a head on
    every level whether it supervises them or not, so the weights are the same either way."""

    def __init__(self, network: nn.Module, patch: list[int], stride: list[int], deep_supervision: bool = False):
        super().__init__()
        self.network = network
        self.input_edge: nn.Module = nn.Identity()  # an edge layer on the image (segnet.nnunet.edges)
        self.edge_places: list[str] = []  # where segnet.nnunet.edges put edge layers
        self.patch, self.stride = list(patch), list(stride)  # in nnU-Net's axis order
        self.deep_supervision = deep_supervision

    @property
    def supervision_heads(self) -> list[nn.Module]:
        """The heads of the coarser levels training's loss takes (EdgeUNet's name for them)."""
        heads = list(self.network.decoder.seg_layers)[1:-1]  # coarsest first; the last is the full resolution's
        return heads[::-1] if self.deep_supervision else []

    def forward(self, x: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        dims = x.ndim - 2
        order = [0, 1, *range(x.ndim - 1, 1, -1)]
        x = x.permute(order)
        size = x.shape[2:]
        target = [max(p, s + (-s) % k) for s, p, k in zip(size, self.patch, self.stride, strict=True)]
        before = [(t - s) // 2 for s, t in zip(size, target, strict=True)]
        if target != list(size):
            after = [t - s - b for s, t, b in zip(size, target, before, strict=True)]
            pad = [p for axis in reversed(range(dims)) for p in (before[axis], after[axis])]
            x = F.pad(x, pad)
        self.network.decoder.deep_supervision = self.deep_supervision and self.training
        output = self.network(self.input_edge(x))
        window = (slice(None), slice(None), *(slice(b, b + s) for b, s in zip(before, size, strict=True)))
        if isinstance(output, torch.Tensor):
            return output[window].permute(order)
        supervised = [level.permute(order) for level in output[:-1]]  # the coarsest: weight 0 in nnU-Net's trainer
        return supervised if len(supervised) > 1 else supervised[0]  # training's own patch, never padded
