"""The files of segnet-export's program, named without torch: segnet-predict checks what it is
given before the prediction code is imported."""

from __future__ import annotations

from pathlib import Path


def metadata_path(package: Path) -> Path:
    """model.json beside model.pt2: what prediction needs besides the network."""
    return package.with_suffix(".json")
