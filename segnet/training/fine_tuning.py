"""Fine-tuning (model.init_from=CKPT, nnU-Net's -pretrained_weights): a new run whose network
starts from another run's weights. Only the weights are taken, weights-only: the optimizer, the
schedule and the step count start afresh, as in any new run. Every tensor of the network must be
in the checkpoint with its shape, except the heads' when the classes differ: they then keep
their fresh initialization, as do deep-supervision heads the checkpoint lacks. Anything else
that does not fit stops the run with the tensors' names, before anything is written."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from segnet.errors import ConfigError
from segnet.inference.loading import read_checkpoint

log = logging.getLogger(__name__)
HEADS = ("head.", "supervision_heads.")  # EdgeUNet's output convolutions: one channel per class


def checkpoint_weights(path: Path) -> dict[str, torch.Tensor]:
    """The network's weights of a checkpoint of segnet's training, read weights-only."""
    if not path.is_file():
        raise ConfigError(f"model.init_from={path} is not a file; point it at a run's checkpoints/best.ckpt")
    _, weights = read_checkpoint(path)
    if not weights:
        raise ConfigError(f"model.init_from={path} holds no network weights of segnet's training; point it at a "
                          "run's checkpoints/best.ckpt or last.ckpt")
    return weights


def initialize_from(net: torch.nn.Module, path: str | Path) -> list[str]:
    """Loads `path`'s weights into `net`; returns the tensors left as initialized (the heads',
    for other classes, or the deep-supervision heads a checkpoint without them lacks)."""
    weights, own = checkpoint_weights(Path(path)), net.state_dict()
    misfits = [f"{name} (not there)" if name not in weights else
               f"{name} ({tuple(weights[name].shape)} there, {tuple(tensor.shape)} here)"
               for name, tensor in own.items()
               if not name.startswith(HEADS) and (name not in weights or weights[name].shape != tensor.shape)]
    if misfits:
        shown = misfits[:8] + ([f"and {len(misfits) - 8} more"] if len(misfits) > 8 else [])
        raise ConfigError(f"model.init_from={path} does not fit this network: " + "; ".join(shown)
                          + ". Fine-tune with the model settings the checkpoint was trained with (model.channels, "
                          "strides, edge_placement, ...); only the number of classes may differ")
    fresh = [name for name, tensor in own.items()
             if name.startswith(HEADS) and (name not in weights or weights[name].shape != tensor.shape)]
    taken = {name: weights[name] for name in own if name not in fresh}
    net.load_state_dict(taken, strict=not fresh)
    log.info("model.init_from=%s: %d tensors loaded%s", path, len(taken),
             f", {len(fresh)} of the heads' initialized afresh ({', '.join(fresh)})" if fresh else "")
    return fresh
