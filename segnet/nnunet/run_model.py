"""nnU-Net's network as a segnet run's model section: what a fine-tuned run's checkpoint holds
instead of EdgeUNet's arguments, so that segnet-predict, -evaluate and -export rebuild nnU-Net's
architecture from the checkpoint alone (segnet.model.network.build_network reads it), without the
nnU-Net folder it started from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from segnet.data.regions import Regions, output_names
from segnet.nnunet.architecture import NnunetAxes, build_nnunet_network, total_stride
from segnet.nnunet.edges import insert_edge_layers
from segnet.nnunet.folder import ModelFolder
from segnet.nnunet.plans import configuration

NETWORK = "nnunet"  # the model section's "network": nnU-Net's architecture, not EdgeUNet


def model_section(config: dict[str, Any], in_channels: int, outputs: int, deep_supervision: bool = False,
                  edge_placement: list[str] | tuple[str, ...] = (), init_from: str | None = None) -> dict[str, Any]:
    """The model section of a run of a plan's configuration (nnU-Net's `architecture` and patch)."""
    return {"network": NETWORK, "architecture": config["architecture"], "patch_size": list(config["patch_size"]),
            "in_channels": in_channels, "out_channels": outputs, "deep_supervision": deep_supervision,
            "edge_placement": list(edge_placement), "init_from": init_from}


def network_of(model: dict[str, Any], backend: str = "auto", where: Path = Path("the model section")) -> NnunetAxes:
    """A model section's network, freshly initialized as nnU-Net initializes it, on segnet's axis
    order, with edge layers (alpha 0) at its edge_placement; `where` its architecture came from."""
    architecture = model["architecture"]
    network = build_nnunet_network(architecture, model["in_channels"], model["out_channels"],
                                   model["deep_supervision"], where)
    net = NnunetAxes(network, model["patch_size"], total_stride(architecture), model["deep_supervision"])
    insert_edge_layers(net, model["edge_placement"], model["in_channels"], backend)
    return net


def outputs_of(data: dict) -> int:
    """The network's output channels for a run's data section: one per class, or per region."""
    return len(output_names(data["class_names"], Regions.from_settings(data["regions"])))


def nnunet_model_section(folder: ModelFolder, data: dict, **settings) -> dict:
    """The model section of a run of the folder's configuration."""
    config = configuration(folder.plans, folder.configuration, folder.path)
    return model_section(config, data["in_channels"], outputs_of(data), **settings)


def nnunet_network(folder: ModelFolder, data: dict, **settings) -> NnunetAxes:
    """The folder's network, freshly initialized, on segnet's axis order."""
    return network_of(nnunet_model_section(folder, data, **settings), where=folder.path / "plans.json")
