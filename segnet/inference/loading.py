"""Models to predict with: a training checkpoint, read weights-only (segnet.checkpoints.reading),
on the device the user asks for with the op backend that runs there. The network is rebuilt from
the checkpoint's own settings (segnet.model), so loading needs no training code.
"""

from __future__ import annotations

from pathlib import Path

import torch

import ops
from segnet.checkpoints.reading import CheckpointError, not_segnet, read_checkpoint
from segnet.errors import ConfigError
from segnet.inference.trained_model import TrainedModel
from segnet.model.network import build_network
from segnet.nnunet.folder import is_model_checkpoint


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu", backend: str = "auto") -> TrainedModel:
    """A training checkpoint's network, rebuilt from the hyperparameters it holds (segnet's
    training saves them all) with the op on `backend`, its weights loaded, on `device`."""
    checkpoint, weights = read_checkpoint(path)  # on the CPU: only the network's weights go to the device
    hparams = checkpoint.get("hyper_parameters")
    if not hparams or not {"model", "data", "inference"} <= hparams.keys() or not weights:
        raise not_segnet(path)
    net = build_network(hparams["model"], backend)
    try:
        net.load_state_dict(weights)
    except RuntimeError as error:
        raise CheckpointError(f"{path}'s weights do not fit the network its settings describe: {error}") from None
    device = torch.device(device)
    return TrainedModel(net.to(device), dict(hparams["data"]), dict(hparams["inference"]), device,
                        hparams.get("precision", "32-true"), backend, checkpoint.get("global_step"))


def inference_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no GPU is visible; use device=cpu or device=auto")
    if requested not in ("cpu", "cuda"):
        raise ConfigError(f"device={requested}; use auto, cpu or cuda")
    return torch.device(requested)


def load_for_inference(checkpoint: Path, device_name: str, backend_name: str) -> TrainedModel:
    """A checkpoint's model on the requested device, with the op backend that runs there; a
    checkpoint in a fold of an nnU-Net v2 trained model folder as its fold's model."""
    device = inference_device(device_name)
    if is_model_checkpoint(Path(checkpoint)):
        from segnet.inference.nnunet_model import (
            load_nnunet,  # the extra's: its network is dynamic_network_architectures'
        )

        return load_nnunet(Path(checkpoint), device)
    try:
        backend = ops.resolve_backend(backend_name, device)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return load_checkpoint(checkpoint, device, backend)
