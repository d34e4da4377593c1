"""Checkpoints written whole or not at all (every checkpoint, best.ckpt too), and flushed to disk
before they replace the previous one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from segnet.checkpoints.reading import read_whole


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save into a temporary file beside the target, flushed to disk, then renamed over it:
    a crash or a kill at any moment leaves the previous checkpoint or the new one, never a
    truncated file."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(temporary, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
        folder = os.open(path.parent, os.O_RDONLY)  # make the rename itself durable
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def rewrite_callback_state(path: Path, callback: L.Callback) -> None:
    """`callback`'s state as it is now in the checkpoint at `path` (atomically): for a state that
    changes after the checkpoint was written, which a resume from it must see."""
    saved = read_whole(path)
    saved["callbacks"][callback.state_key] = callback.state_dict()
    AtomicCheckpointIO().save_checkpoint(saved, path)
