"""nnU-Net's checkpoints (fold_<N>/checkpoint_final.pth), read weights-only: besides tensors and
plain containers, nnU-Net stores numpy scalars (its logged Dice and losses, their dtypes) and the
torch.device it trained on; exactly those types are allowed, so that anything else in the file
(a pickled class or function) is refused, named, before it could run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from segnet.checkpoints.reading import CheckpointError, read_whole

WEIGHTS = "network_weights"  # nnU-Net's key of the network's state_dict
ADVICE = "nnU-Net's own checkpoints hold nothing else: use the file nnU-Net's training wrote"


def numpy_types() -> list[Any]:
    """The numpy types nnU-Net's checkpoints pickle: its logged numpy scalars and their dtypes."""
    scalar = np._core.multiarray.scalar if hasattr(np, "_core") else np.core.multiarray.scalar
    dtypes = [type(np.dtype(kind)) for kind in (np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_)]
    return [scalar, np.dtype, *dtypes]


def read_nnunet_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint of nnU-Net's training, read weights-only with numpy's scalars allowed; a
    CheckpointError naming the file and the type where it holds anything else, or no weights."""
    checkpoint = read_whole(path, allowed=numpy_types(), advice=ADVICE)
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get(WEIGHTS), dict):
        raise CheckpointError(f"{path} holds no {WEIGHTS}: it is not a checkpoint of nnU-Net v2's training")
    return checkpoint


def network_weights(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The network's weights, without the prefix of a compiled network (torch.compile's)."""
    return {name.removeprefix("_orig_mod."): value for name, value in checkpoint[WEIGHTS].items()}
