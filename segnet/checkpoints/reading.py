"""Every checkpoint segnet reads is read here, through torch's weights-only unpickler
(`weights_only=True`), so opening a checkpoint from elsewhere cannot run code. One that holds
anything else (a pickled function or class instance) is refused with a CheckpointError that says
so, and so is one without the hyperparameters segnet's training saves, where they are asked for.
What needs no weights is read memory-mapped: the tensors are not read.

What an older segnet did not record in a checkpoint, as it implied it, is filled in here and
nowhere else: in its settings (segnet.checkpoints.settings), and in its hyperparameters where a
resume compares them with a run's now (as_saved_now)."""

from __future__ import annotations

import contextlib
import pickle
import re
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import torch

from segnet.checkpoints.settings import RunSettings, configuration_of
from segnet.data.samples import FOREGROUND_SHARE
from segnet.errors import ConfigError


class CheckpointError(ConfigError):
    """A checkpoint cannot be loaded safely; the message says why and what to do."""


NET = "net."  # the training module's name for the network: its weights' prefix in a checkpoint


REFUSED_GLOBAL = re.compile(r"GLOBAL (\S+)")  # how the weights-only unpickler names what it refused
SEGNET_ADVICE = "Use a checkpoint written by segnet's training, or re-save this one's state_dict from code you trust."


@contextlib.contextmanager
def refusing_unsafe(path: str | Path, advice: str = SEGNET_ADVICE) -> Iterator[None]:
    """Turns the weights-only unpickler's refusal inside the block into a CheckpointError naming
    the type it refused."""
    try:
        yield
    except pickle.UnpicklingError as error:
        refused = REFUSED_GLOBAL.search(str(error))
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"{path} holds Python objects other than tensors and plain containers, and segnet loads "
            "checkpoints weights-only so that loading one cannot run code "
            f"({f'it holds {refused[1]}' if refused else first_line}). {advice}"
        ) from None


def read_whole(path: str | Path, mmap: bool = False, allowed: Collection[Any] = (),
               advice: str = SEGNET_ADVICE) -> Any:
    """Everything a checkpoint holds, read weights-only on the CPU (mmap: its tensors as they are
    used), with the types `allowed` besides tensors and plain containers."""
    with refusing_unsafe(path, advice), torch.serialization.safe_globals(list(allowed)):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


def not_segnet(path: str | Path) -> CheckpointError:
    return CheckpointError(f"{path} is not a checkpoint of segnet's training (it lacks the hyperparameters and "
                           "weights it saves): use a run's checkpoints/final.ckpt, best.ckpt or last.ckpt")


def read_checkpoint(path: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """A checkpoint, read weights-only on the CPU, and its network's weights (names without the
    training module's prefix; none if it is not a checkpoint of segnet's training)."""
    checkpoint = read_whole(path)
    if not isinstance(checkpoint, dict):
        return {}, {}
    state = checkpoint.get("state_dict", {})
    return checkpoint, {name.removeprefix(NET): value for name, value in state.items() if name.startswith(NET)}


def saved_step(path: str | Path) -> int:
    """The optimizer step a checkpoint was saved at (its weights are not read)."""
    return int(read_whole(path, mmap=True)["global_step"])


# Settings a newer segnet records, as an older one worked without them: its stem, no crop to the
# anatomy, two thirds of the crops on the foreground
IMPLIED = {"model.stem": "residual", "data.crop": "none", "data.foreground_share": FOREGROUND_SHARE}


def as_saved_now(hparams: dict[str, Any], recorded: Collection[str]) -> dict[str, Any]:
    """A checkpoint's hyperparameters with what a newer segnet records and an older one implied:
    the plan's configuration of a run that only recorded its spatial dims, the patch of generated
    data under its present name (data.roi_size before), and each IMPLIED setting
    that a run records now where it has it (`recorded`: "section.name" keys)."""
    filled = {name: dict(section) if isinstance(section, dict) else section for name, section in hparams.items()}
    data = filled.get("data")
    if isinstance(data, dict) and "plan" in data and "spatial_dims" in data:
        data["configuration"] = configuration_of(data)
    if isinstance(data, dict) and "roi_size" in data:  # generated data's patch, before it was named so
        data.setdefault("patch_size", data.pop("roi_size"))
    for key, value in IMPLIED.items():
        section, name = key.split(".")
        if key in recorded and isinstance(filled.get(section), dict):
            filled[section].setdefault(name, value)
    return filled


def saved_hyperparameters(path: str | Path) -> dict[str, Any]:
    """The hyperparameters segnet's training saved in a checkpoint (its weights are not read); a
    CheckpointError for a checkpoint from elsewhere."""
    checkpoint = read_whole(path, mmap=True)
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if not isinstance(hparams, dict) or not isinstance(hparams.get("data"), dict):
        raise not_segnet(path)
    return hparams


def saved_data(path: str | Path) -> dict[str, Any]:
    """The data section a run's checkpoint holds (its split, and its settings by name)."""
    return saved_hyperparameters(path)["data"]


def run_settings(path: str | Path) -> RunSettings:
    """The settings of the run a checkpoint was trained in."""
    return RunSettings.from_data(saved_data(path))
