"""Models to predict with: a training checkpoint, loaded safely, on the device the user asks for
with the op backend that runs there. The network is rebuilt from the checkpoint's own settings
(segnet.model), so loading needs no training code.

Every checkpoint segnet reads goes through torch's weights-only unpickler (`weights_only=True`),
so opening a checkpoint from elsewhere cannot run code. One that holds anything else (a pickled
function or class instance) is refused with a CheckpointError that says so.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

import ops
from segnet.errors import ConfigError
from segnet.inference.model import TrainedModel
from segnet.model.network import build_network


class CheckpointError(ConfigError):
    """A checkpoint cannot be loaded safely; the message says why and what to do."""


FINAL = "final.ckpt"  # a finished run's final weights, nnU-Net's checkpoint_final: what commands read by default
BEST = f"a training run's checkpoints/{FINAL}"
NET = "net."  # the training module's name for the network: its weights' prefix in a checkpoint


def checkpoint_paths(cfg: DictConfig, key: str = "ckpt_path", shown_as: str | None = None,
                     what: str = BEST) -> list[Path]:
    """The file(s) a command was given under `key` (one, or a list for an ensemble), or a
    ConfigError saying that `what` is expected instead."""
    shown_as = shown_as or key
    if OmegaConf.is_missing(cfg, key) or cfg.get(key) is None:
        raise ConfigError(f"{shown_as} is required: point it at {what}")
    given = cfg[key]
    paths = [Path(p) for p in (given if OmegaConf.is_list(given) else [given])]
    for path in paths:
        check_checkpoint_file(path, shown_as, what)
    return paths


def check_checkpoint_file(path: Path, shown_as: str, what: str = BEST) -> None:
    """A ConfigError unless `path` is a file: for a run's final.ckpt, that the run has not finished."""
    if path.name == FINAL and not path.is_file() and (path.parent / "last.ckpt").is_file():
        raise ConfigError(f"{shown_as}={path}: that run has not finished (a run writes {FINAL} at its end). "
                          "Resume it (segnet-train ckpt_path=auto in its folder), or name its last.ckpt or "
                          "best.ckpt to use the weights it has")
    if not path.is_file():
        raise ConfigError(f"{shown_as}={path} is not a file; point it at {what}")


def one_checkpoint(cfg: DictConfig, purpose: str, what: str = BEST) -> Path:
    """The single checkpoint of a command that takes one."""
    paths = checkpoint_paths(cfg, what=what)
    if len(paths) != 1:
        raise ConfigError(
            f"ckpt_path has {len(paths)} checkpoints; {purpose} takes one (segnet-predict ensembles them)"
        )
    return paths[0]


@contextlib.contextmanager
def refusing_unsafe(path: str | Path) -> Iterator[None]:
    """Turns the weights-only unpickler's refusal inside the block into a CheckpointError."""
    try:
        yield
    except pickle.UnpicklingError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"{path} holds Python objects other than tensors and plain containers, and segnet loads "
            f"checkpoints weights-only so that loading one cannot run code ({first_line}). Use a checkpoint "
            "written by segnet's training, or re-save this one's state_dict from code you trust."
        ) from None


def read_checkpoint(path: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """A checkpoint, read weights-only on the CPU, and its network's weights (names without the
    training module's prefix; none if it is not a checkpoint of segnet's training)."""
    with refusing_unsafe(path):
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict):
        return {}, {}
    state = checkpoint.get("state_dict", {})
    return checkpoint, {name.removeprefix(NET): value for name, value in state.items() if name.startswith(NET)}


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu", backend: str = "auto") -> TrainedModel:
    """A training checkpoint's network, rebuilt from the hyperparameters it holds (segnet's
    training saves them all) with the op on `backend`, its weights loaded, on `device`."""
    checkpoint, weights = read_checkpoint(path)  # on the CPU: only the network's weights go to the device
    hparams = checkpoint.get("hyper_parameters")
    if not hparams or not {"model", "data", "inference"} <= hparams.keys() or not weights:
        raise CheckpointError(f"{path} is not a checkpoint of segnet's training (it lacks the hyperparameters "
                              "and weights it saves): use a run's checkpoints/best.ckpt or last.ckpt")
    net = build_network(hparams["model"], backend)
    try:
        net.load_state_dict(weights)
    except RuntimeError as error:
        raise CheckpointError(f"{path}'s weights do not fit the network its settings describe: {error}") from None
    device = torch.device(device)
    return TrainedModel(net.to(device), dict(hparams["data"]), dict(hparams["inference"]), device,
                        hparams.get("precision", "32-true"), backend, checkpoint.get("global_step"))


def run_folder(checkpoint: Path) -> Path:
    """The run a checkpoint belongs to (<run>/checkpoints/<name>.ckpt), or its own folder."""
    folder = checkpoint.resolve().parent
    return folder.parent if folder.name == "checkpoints" else folder


def inference_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no GPU is visible; use device=cpu or device=auto")
    if requested not in ("cpu", "cuda"):
        raise ConfigError(f"device={requested}; use auto, cpu or cuda")
    return torch.device(requested)


def load_for_inference(checkpoint: Path, device_name: str, backend_name: str) -> TrainedModel:
    """A checkpoint's model on the requested device, with the op backend that runs there."""
    device = inference_device(device_name)
    try:
        backend = ops.resolve_backend(backend_name, device)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return load_checkpoint(checkpoint, device, backend)
