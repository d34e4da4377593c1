"""Edge layers inserted into nnU-Net's network (y = x + alpha * |Sobel(x)|, ops.EdgeEnhance) with
alpha 0: each is the identity when inserted, so the network computes exactly what it did, and
fine-tuning decides how much edge each place gets.

The places (segnet.model.network's names): "input", on the image before the network; "skips", on
each encoder stage's output, which nnU-Net's decoder takes as that level's skip (and the next
stage as its input)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from ops import EdgeEnhance
from segnet.errors import ConfigError
from segnet.nnunet.architecture import NnunetAxes

# Where nnU-Net's network takes edge layers: EdgeUNet's places (segnet.model.network.PLACEMENTS),
# named the same so that model.edge_placement means one thing for both networks.
PLACES = ("input", "skips")


def stage_channels(stage: nn.Module) -> int:
    """The channels an encoder stage puts out: those of its last convolution."""
    return [module for module in stage.modules() if isinstance(module, nn.modules.conv._ConvNd)][-1].out_channels


def insert_edge_layers(net: NnunetAxes, places: Sequence[str], in_channels: int, backend: str = "auto") -> None:
    """Edge layers with alpha 0 at `places` (of PLACES) of `net`, in place: its weights, loaded
    before, stay where they are, and the network's outputs stay what they were."""
    unknown = sorted(set(places) - set(PLACES))
    if unknown:
        raise ConfigError(f"model.edge_placement names {', '.join(unknown)}; nnU-Net's networks take edge layers at "
                          f"{', '.join(PLACES)}")
    net.edge_places = [*net.edge_places, *places]
    if "input" in places:
        net.input_edge = EdgeEnhance(in_channels, backend=backend, alpha_init=0.0)
    if "skips" in places:
        stages = net.network.encoder.stages
        for index, stage in enumerate(stages):
            stages[index] = nn.Sequential(stage, EdgeEnhance(stage_channels(stage), backend=backend, alpha_init=0.0))
