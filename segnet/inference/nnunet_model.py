"""A fold of an nnU-Net v2 trained model folder as a TrainedModel: its network built from the plan,
its weights from the fold's checkpoint, its data settings from the plan and dataset.json
(segnet.nnunet.plans). segnet-predict predicts, and ensembles, with it as with its own runs."""

from __future__ import annotations

from pathlib import Path

import torch

from segnet.checkpoints.reading import NET, CheckpointError
from segnet.inference.trained_model import TrainedModel
from segnet.nnunet.checkpoint import network_weights, read_nnunet_checkpoint
from segnet.nnunet.folder import ModelFolder, fold_of, folder_of
from segnet.nnunet.plans import run_data, run_inference
from segnet.nnunet.run_model import nnunet_model_section, nnunet_network


def load_nnunet(checkpoint: Path, device: torch.device) -> TrainedModel:
    """The model of a fold's checkpoint (fold_<N>/checkpoint_final.pth or another), on `device`."""
    folder = ModelFolder.read(folder_of(checkpoint))
    data = run_data(folder, fold_of(checkpoint))
    net = nnunet_network(folder, data)
    saved = read_nnunet_checkpoint(checkpoint)
    try:
        net.network.load_state_dict(network_weights(saved))
    except RuntimeError as error:
        raise CheckpointError(f"{checkpoint}'s weights do not fit the network {folder.path / 'plans.json'} describes "
                              f"for {folder.configuration}: {str(error).splitlines()[0]}") from None
    return TrainedModel(net.to(device), data, run_inference(data), device, "32-true", "auto",
                        saved.get("current_epoch"))


def as_run_checkpoint(checkpoint: Path) -> dict:
    """A fold's checkpoint as a segnet run's (its settings and its network's weights), which
    segnet.inference.loading rebuilds without the nnU-Net folder: what a model package holds."""
    model = load_nnunet(checkpoint, torch.device("cpu"))
    return {"hyper_parameters": {"model": nnunet_model_section(ModelFolder.read(folder_of(checkpoint)), model.data),
                                 "data": model.data, "inference": model.inference},
            "state_dict": {NET + name: value for name, value in model.net.state_dict().items()},
            "global_step": model.step}
