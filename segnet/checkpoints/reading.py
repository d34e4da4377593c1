"""Every checkpoint segnet reads goes through torch's weights-only unpickler (`weights_only=True`),
so opening a checkpoint from elsewhere cannot run code. One that holds anything else (a pickled
function or class instance) is refused with a CheckpointError that says so."""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from pathlib import Path

import torch

from segnet.errors import ConfigError


class CheckpointError(ConfigError):
    """A checkpoint cannot be loaded safely; the message says why and what to do."""


NET = "net."  # the training module's name for the network: its weights' prefix in a checkpoint


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
