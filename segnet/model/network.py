"""EdgeUNet: a residual U-Net in MONAI's style with edge-enhancement layers placed by config."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from monai.networks.blocks import Convolution, ResidualUnit
from torch import nn

from ops import EdgeEnhance
from segnet.model.sharpening import FixedSharpening
from segnet.model.strides import Level, per_axis, total_strides

PLACEMENTS = ("input", "skips")
SKIP_LAYERS = ("edge", "sharpen")
STEMS = ("conv", "residual")


def on_stride_multiples(net, x: torch.Tensor, stride: Level, minimum: Level = 0) -> torch.Tensor | list[torch.Tensor]:
    """net(x) for any spatial size: each axis padded (replicating the border) up to a multiple of
    `stride` (per axis, or one for all) and at least `minimum`, and the output cropped back. A
    deeply supervised network's lower-resolution outputs are cropped to the same extent."""
    size = x.shape[2:]
    stride, minimum = per_axis(stride, len(size)), per_axis(minimum, len(size))
    pad = [max(s + (-s) % k, m) - s for s, k, m in zip(size, stride, minimum, strict=True)]
    if not any(pad):
        return net(x)
    output = net(F.pad(x, [p for extra in reversed(pad) for p in (0, extra)], mode="replicate"))
    if isinstance(output, torch.Tensor):
        return output[(..., *(slice(0, s) for s in size))]
    padded = [s + p for s, p in zip(size, pad, strict=True)]
    return [level[(..., *(slice(0, math.ceil(s * o / q)) for s, o, q in zip(size, level.shape[2:], padded,
                                                                          strict=True)))]
            for level in output]


class Centred(nn.Module):
    """Its input less the mean of each sample's channel over the window."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=tuple(range(2, x.ndim)), keepdim=True)


def normalized_stem(spatial_dims: int, in_channels: int, out_channels: int, act, norm, dropout: float) -> nn.Module:
    """The window centred, a 3-wide convolution, its normalization and activation: with instance
    normalization its features are the same for a * x + b as for x (a > 0), so no absolute
    intensity reaches the rest of the network. (Uncentred, the zeros the convolution pads with
    would leave a frame of b times the kernel's border taps.)"""
    return nn.Sequential(Centred(), Convolution(spatial_dims, in_channels, out_channels, kernel_size=3, act=act,
                                                norm=norm, dropout=dropout))


class EdgeUNet(nn.Module):
    """U-Net with the constructor of monai.networks.nets.UNet plus edge layers.

    Encoder level i turns channels[i-1] into channels[i] with stride strides[i-1]; the decoder
    mirrors it and concatenates each encoder output (the skip). ``edge_placement`` puts an
    ``ops.EdgeEnhance`` on the input image ("input") and/or on every skip ("skips");
    an empty placement is the plain U-Net. For the ablation's baselines, ``skip_layer="sharpen"``
    puts Sharp U-Net's fixed filter on the skips instead of the edge layer, and
    ``edge_alpha_trainable=False`` keeps every edge layer's strengths at ``edge_alpha_init``.

    The ``stem`` turns the (edge-enhanced) input into channels[0] features: "residual" is MONAI's
    residual unit, whose 1 x 1 projection passes the input's intensities on unnormalized; "conv"
    centres the window, convolves, normalizes and activates, as nnU-Net's first layer, so that the
    features are the same for the input at any intensity scale and offset (normalized_stem). On the
    heads ablation "conv" helped without the crop to the anatomy and not with it, so the default
    stays "residual" (docs/results/robust-on-real-scans.md).

    ``encoder_blocks[i]`` residual units make encoder level i (the first of each strided, at
    least one; a longer list is cut to the levels): more of them deepen the encoder alone, as in
    nnU-Net's residual-encoder U-Nets. The skips and the edge layers on them follow each level's
    last unit.

    A stride is one for all axes or one per axis (an anisotropic plan's ``[1, 2, 2]``). With
    ``deep_supervision``, training's forward returns a list: the full-resolution logits, then
    logits of the decoder at each coarser level but the coarsest (nnU-Net leaves the level next to
    the bottleneck out of the loss: its weight would be the smallest and it sees only a few voxels).
    In eval mode (validation, prediction, export) it returns the full-resolution logits alone.
    """

    def __init__(
        self,
        spatial_dims: int,
        in_channels: int,
        out_channels: int,
        channels: Sequence[int] = (16, 32, 64, 128),
        strides: Sequence[int] = (2, 2, 2),
        num_res_units: int = 1,
        norm: str | tuple = "instance",
        act: str | tuple = "prelu",
        dropout: float = 0.0,
        edge_placement: Sequence[str] = PLACEMENTS,
        edge_alpha_init: float = 0.1,
        edge_alpha_trainable: bool = True,
        skip_layer: str = "edge",
        deep_supervision: bool = False,
        encoder_blocks: Sequence[int] | None = None,
        stem: str = "residual",
        edge_backend: str = "auto",
    ):
        super().__init__()
        if spatial_dims not in (2, 3):
            raise ValueError(f"EdgeUNet: spatial_dims must be 2 or 3, got {spatial_dims}")
        if len(channels) < 2 or len(strides) != len(channels) - 1:
            raise ValueError(
                f"EdgeUNet: need at least 2 channels and one stride per level below the top "
                f"(len(strides) == len(channels) - 1), got channels={list(channels)}, strides={list(strides)}"
            )
        blocks = list(encoder_blocks or [1] * len(channels))[:len(channels)]
        if len(blocks) < len(channels) or min(blocks) < 1:
            raise ValueError(f"EdgeUNet: encoder_blocks needs a positive count for each of the {len(channels)} "
                             f"levels, got {list(encoder_blocks or [])}")
        levels = [per_axis(level, spatial_dims) for level in strides]
        if any(len(level) != spatial_dims or min(level) < 1 for level in levels):
            raise ValueError(f"EdgeUNet: each stride is a positive integer or one per axis ({spatial_dims} of them), "
                             f"got strides={list(strides)}")
        unknown = set(edge_placement) - set(PLACEMENTS)
        if unknown:
            raise ValueError(f"EdgeUNet: edge placement must be a subset of {list(PLACEMENTS)}, got {sorted(unknown)}")
        if skip_layer not in SKIP_LAYERS:
            raise ValueError(f"EdgeUNet: skip_layer must be one of {list(SKIP_LAYERS)}, got {skip_layer!r}")
        if stem not in STEMS:
            raise ValueError(f"EdgeUNet: stem must be one of {list(STEMS)}, got {stem!r}")

        def residual(cin: int, cout: int, stride: int = 1) -> nn.Module:
            return ResidualUnit(
                spatial_dims, cin, cout, strides=stride, subunits=max(num_res_units, 1), act=act, norm=norm,
                dropout=dropout,
            )

        def edge(c: int, where: str) -> nn.Module:
            if where not in edge_placement:
                return nn.Identity()
            if where == "skips" and skip_layer == "sharpen":
                return FixedSharpening(c, spatial_dims)
            layer = EdgeEnhance(c, backend=edge_backend, alpha_init=edge_alpha_init)
            layer.alpha.requires_grad_(edge_alpha_trainable)
            return layer

        self.input_edge = edge(in_channels, "input")
        self.stem = residual(in_channels, channels[0]) if stem == "residual" else normalized_stem(
            spatial_dims, in_channels, channels[0], act, norm, dropout)
        self.down = nn.ModuleList(residual(channels[i], channels[i + 1], levels[i]) for i in range(len(strides)))
        self.more_blocks = nn.ModuleList(  # empty where a level has one unit: its state is as without
            nn.Sequential(*(residual(c, c) for _ in range(n - 1))) for c, n in zip(channels, blocks, strict=True)
        )
        self.skip_edges = nn.ModuleList(edge(channels[i], "skips") for i in range(len(strides)))
        self.upsample = nn.ModuleList(
            Convolution(
                spatial_dims, channels[i + 1], channels[i], strides=levels[i], kernel_size=3, act=act, norm=norm,
                dropout=dropout, is_transposed=True,
            )
            for i in range(len(strides))
        )
        self.fuse = nn.ModuleList(residual(2 * channels[i], channels[i]) for i in range(len(strides)))
        self.head = Convolution(spatial_dims, channels[0], out_channels, kernel_size=1, conv_only=True)
        supervised = range(1, len(strides) - 1) if deep_supervision else range(0)
        self.supervision_heads = nn.ModuleList(
            Convolution(spatial_dims, channels[i], out_channels, kernel_size=1, conv_only=True) for i in supervised
        )
        self.downsampling = total_strides(levels, spatial_dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        # The decoder's upsampled maps line up with the skips only on multiples of the stride.
        return on_stride_multiples(self._unet, x, self.downsampling)

    def _unet(self, x: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        h = self.more_blocks[0](self.stem(self.input_edge(x)))
        skips = []
        for down, more, skip_edge in zip(self.down, self.more_blocks[1:], self.skip_edges, strict=True):
            skips.append(skip_edge(h))
            h = more(down(h))
        coarser = []  # the supervised levels' logits, coarsest first
        supervise = self.training and len(self.supervision_heads) > 0
        for i in reversed(range(len(self.down))):
            h = self.fuse[i](torch.cat([skips[i], self.upsample[i](h)], dim=1))
            if supervise and 0 < i <= len(self.supervision_heads):
                coarser.append(self.supervision_heads[i - 1](h))
        logits = self.head(h)
        return [logits, *reversed(coarser)] if supervise else logits

    def edge_layers(self) -> list[EdgeEnhance]:
        return [m for m in self.modules() if isinstance(m, EdgeEnhance)]


# Keys of a model config that say how a run starts, not what the network is.
NOT_ARCHITECTURE = ("init_from",)


def build_network(model: dict[str, Any], backend: str, **overrides: Any) -> nn.Module:
    """The network of a model config (conf/model/, whose other keys are EdgeUNet's arguments),
    with `overrides` of some of them (planning counts both spatial modes); a run fine-tuned from
    an nnU-Net model records nnU-Net's architecture instead (segnet.nnunet.run_model)."""
    if model.get("network") == "nnunet":
        from segnet.nnunet.run_model import network_of  # the peer extra's network package: only where asked

        return network_of(model, backend)
    architecture = {key: value for key, value in model.items() if key not in NOT_ARCHITECTURE}
    return EdgeUNet(**{**architecture, **overrides}, edge_backend=backend)
