"""The network a plan proposes for its patch, by nnU-Net's rule: halve every axis that is still
at least twice the bottleneck's edge (MIN_EDGE voxels) and within a factor 2 of the finest
spacing among those, until no axis can be halved (a lone axis only while it is at least three
edges long); features double per level from BASE_FEATURES up to a cap. The patch is then padded
up to the network's total stride per axis. nnU-Net also narrows kernels to 1 along coarse axes;
segnet's levels keep 3 everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from segnet.model.strides import total_strides

MIN_EDGE = 4  # voxels per axis at the bottleneck, at least
BASE_FEATURES = 32
MAX_FEATURES = {2: 512, 3: 320}


@dataclass(frozen=True)
class NetworkShape:
    channels: list[int]  # per level, the full resolution first
    strides: list[list[int]]  # per level below the top, one per axis
    patch_size: list[int]  # the patch padded to the total stride


def network_shape(spacing: Sequence[float], patch: Sequence[int]) -> NetworkShape:
    dims = len(patch)
    spacing, size = [float(s) for s in spacing], [float(p) for p in patch]
    strides: list[list[int]] = []
    while True:
        axes = [a for a in range(dims) if size[a] >= 2 * MIN_EDGE]
        if axes:
            finest = min(spacing[a] for a in axes)
            axes = [a for a in axes if spacing[a] / finest < 2]
        if not axes or (len(axes) == 1 and size[axes[0]] < 3 * MIN_EDGE):
            break
        strides.append([2 if a in axes else 1 for a in range(dims)])
        for a in axes:
            spacing[a] *= 2
            size[a] = math.ceil(size[a] / 2)
    channels = [min(MAX_FEATURES[dims], BASE_FEATURES * 2**level) for level in range(len(strides) + 1)]
    divisor = total_strides(strides, dims)
    padded = [d * math.ceil(p / d) for p, d in zip(patch, divisor, strict=True)]
    return NetworkShape(channels, strides, padded)
