"""Loading checkpoints safely: only tensors and plain containers, never pickled code.

Every checkpoint segnet reads goes through torch's weights-only unpickler (`weights_only=True`),
so opening a checkpoint from elsewhere cannot run code. One that holds anything else (a pickled
function or class instance) is refused with a CheckpointError that says so.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from pathlib import Path

from .errors import ConfigError


class CheckpointError(ConfigError):
    """A checkpoint cannot be loaded safely; the message says why and what to do."""


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


def load_module(path: str | Path, **kwargs):
    """SegmentationModule.load_from_checkpoint, weights-only."""
    from .lightning_module import SegmentationModule

    with refusing_unsafe(path):
        return SegmentationModule.load_from_checkpoint(path, weights_only=True, **kwargs)
