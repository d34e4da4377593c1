"""A network's strides, one per level: an integer for every axis or one per axis (an anisotropic
plan's [1, 2, 2]). Apart from the network so that planning reads them without building one."""

from __future__ import annotations

import math
from collections.abc import Sequence

Level = int | Sequence[int]


def per_axis(value: Level, dims: int) -> tuple[int, ...]:
    return (int(value),) * dims if isinstance(value, int) else tuple(int(v) for v in value)


def total_strides(strides: Sequence[Level], dims: int) -> tuple[int, ...]:
    """The network's downsampling per axis: the product of its levels' strides."""
    return tuple(math.prod(per_axis(level, dims)[axis] for level in strides) for axis in range(dims))
