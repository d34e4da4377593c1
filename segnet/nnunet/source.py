"""An nnU-Net v2 model a run fine-tunes from (model.init_from=<its checkpoint_final.pth, a fold_<N>
folder, or the trained model folder of a single fold>): its settings as a segnet run's, and its
weights named as in the run's network, edge layers included."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from segnet.errors import ConfigError
from segnet.nnunet.checkpoint import network_weights, read_nnunet_checkpoint
from segnet.nnunet.edges import insert_edge_layers
from segnet.nnunet.folder import (
    FINAL,
    FOLD,
    ModelFolder,
    fold_checkpoints,
    fold_of,
    folder_of,
    is_model_checkpoint,
    is_model_folder,
)
from segnet.nnunet.plans import configuration, run_data
from segnet.nnunet.run_model import nnunet_network


def nnunet_checkpoint(path: Path) -> Path | None:
    """The nnU-Net checkpoint `path` names (itself, its fold folder's checkpoint_final.pth, or that
    of the trained model folder's one fold); None where `path` is not nnU-Net's."""
    if path.is_file():
        return path if is_model_checkpoint(path) else None
    if path.is_dir() and FOLD.match(path.name) and is_model_folder(path.parent):
        if not (path / FINAL).is_file():
            raise ConfigError(f"model.init_from={path} has no {FINAL}: train the fold to its end with nnU-Net, or "
                              "name another of its checkpoints (e.g. checkpoint_best.pth)")
        return path / FINAL
    if is_model_folder(path):
        folds = fold_checkpoints(path, shown_as="model.init_from")
        if len(folds) > 1:
            raise ConfigError(f"model.init_from={path} has the folds {', '.join(p.parent.name for p in folds)}: "
                              f"fine-tuning starts from one, name it (model.init_from={path}/fold_0)")
        return folds[0]
    return None


@dataclass(frozen=True)
class NnunetSource:
    checkpoint: Path
    folder: ModelFolder
    data: dict[str, Any]  # its data section as a segnet run's (segnet.nnunet.plans.run_data)

    @classmethod
    def read(cls, checkpoint: Path) -> NnunetSource:
        folder = ModelFolder.read(folder_of(checkpoint))
        return cls(checkpoint, folder, run_data(folder, fold_of(checkpoint)))

    def configuration(self) -> dict[str, Any]:
        return configuration(self.folder.plans, self.folder.configuration, self.folder.path)

    def weights_for(self, edge_places: list[str]) -> dict[str, torch.Tensor]:
        """Its weights named as in a network of its own with edge layers (alpha 0) at `edge_places`."""
        net = nnunet_network(self.folder, self.data)
        net.network.load_state_dict(network_weights(read_nnunet_checkpoint(self.checkpoint)))
        insert_edge_layers(net, edge_places, self.data["in_channels"], backend="python")
        return net.state_dict()


def nnunet_source(path: Path) -> NnunetSource | None:
    """The nnU-Net model at `path`, or None where `path` is not nnU-Net's."""
    checkpoint = nnunet_checkpoint(path)
    return None if checkpoint is None else NnunetSource.read(checkpoint)
