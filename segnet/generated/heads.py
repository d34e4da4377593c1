"""Brain MRI as an archive holds it: what the other generated datasets hide, and real scans have.

Each case is a slab of SLICES axial slices (1 x 1 x 4 mm) through a T1 head of segnet.generated.brain
whose brain ends at its top in a dome (TOP_MM), so that the highest slabs show the brain's tip: the
white matter thins to islands, then to nothing, under the cortex, the skull and the scalp; air above.
What varies from case to case, as in a multi-site collection:

- the field of view: its in-plane sides are the head grid's times a zoom (log-uniform, each side a
  little apart), with the head anywhere in it, so that air takes from about 30 % to over 95 % of a
  volume;
- the air is the scanner's noise (a magnitude image: Rician, positive, in integers), not zeros;
- a zero-filled border on one case in three (ZERO_BORDER_SHARE): a scan padded by its export,
  4 to 20 voxels of exact zeros around the noise;
- the scanner: gain (100 to 3000 units), contrast (a gamma), bias field, noise (brain.draw_scanner);
- the region of the head: each case's slab lies in one band of REGIONS along the head's height, and
  the dataset's splits_final.json holds one band out per fold, so that every fold's validation
  cases show a part of the head that its training cases never show: fold 0 the top (the brain's
  dome: little white matter, scanned with wide fields of view only, so mostly air), fold 1 the
  bottom (below the ventricles and deep nuclei), folds 2 to 4 bands in between.

A model that depends on how much air surrounds the head, or on its intensities' absolute scale,
fails here on fold 0 (docs/results/robust-on-real-scans.md). Train it in 2D. Each case is a
function of the dataset's seed and its index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from segnet.generated.brain import CLASS_NAMES, TISSUES, draw_scanner, render, tissue_shares
from segnet.generated.phantom import affine_for, write_case, write_dataset_json

SPACING = (1.0, 1.0, 4.0)
SLICES = 6
HEAD_VOXELS = 112  # in-plane side of the grid the anatomy is drawn on: the whole head, with a margin
TOP_MM = 70.0  # the brain's top, above the head's middle; the scalp ends 9 mm higher
ZERO_BORDER_SHARE = 1 / 3


@dataclass(frozen=True)
class Region:
    """A band of the head's height that one fold holds out, and how its cases were scanned."""

    name: str
    centres: tuple[float, float]  # lowest and highest centre of a slab, mm above the head's middle
    zoom: tuple[float, float]  # the field of view's side over the head grid's (log-uniform)


# A slab's slices lie at its centre +- 10 mm: no two bands share a slice height. The top was
# scanned elsewhere, with wide fields of view only (as the held-out cases of a real archive can be:
# other anatomy and another protocol at once); the rest from cutting into the scalp to wide.
NARROW_TO_WIDE = (0.68, 2.4)
REGIONS = (Region("top", (56.0, 64.0), (2.4, 3.6)), Region("bottom", (-52.0, -46.0), NARROW_TO_WIDE),
           Region("lower", (-25.0, -19.0), NARROW_TO_WIDE), Region("middle", (2.0, 8.0), NARROW_TO_WIDE),
           Region("upper", (29.0, 34.0), NARROW_TO_WIDE))


def embed(shares: np.ndarray, field: tuple[int, int], state: np.random.RandomState) -> np.ndarray:
    """Tissue shares of a head grid placed in a field of view of `field` voxels in-plane: anywhere
    inside a larger field, centred (the scalp cut) in a smaller one; air elsewhere."""
    canvas = np.zeros((shares.shape[0], *field, shares.shape[-1]), shares.dtype)
    canvas[TISSUES.index("outside")] = 1.0
    target, source = [], []
    for side, head in zip(field, shares.shape[1:3], strict=True):
        offset = state.randint(0, side - head + 1) if side >= head else (side - head) // 2
        lo, hi = max(offset, 0), min(offset + head, side)
        target.append(slice(lo, hi))
        source.append(slice(lo - offset, hi - offset))
    canvas[:, target[0], target[1]] = shares[:, source[0], source[1]]
    return canvas


class Head(NamedTuple):
    image: np.ndarray  # float32
    label: np.ndarray  # uint8: 0 background, 1 grey matter, 2 white matter
    region: str  # of REGIONS
    background: float  # the share of the volume that is air or zero border


def heads_case(index: int, seed: int = 0) -> Head:
    """Case `index` of the dataset of `seed`."""
    case_seed = (seed * 1_000_003 + index) % 2**32
    region = REGIONS[index % len(REGIONS)]
    placement = np.random.RandomState(case_seed ^ 0xF1E1D)
    anatomy = np.random.RandomState(case_seed)
    shares = tissue_shares((HEAD_VOXELS, HEAD_VOXELS, SLICES), SPACING, anatomy,
                           z_centre=placement.uniform(*region.centres), top_mm=TOP_MM)
    zoom = np.exp(placement.uniform(*np.log(region.zoom)) + placement.uniform(-0.1, 0.1, 2))  # sides a little apart
    field = tuple(int(round(HEAD_VOXELS * side)) for side in zoom)
    scanner = draw_scanner(np.random.RandomState(case_seed ^ 0x5CA2), log_gain=(2.0, 3.5), noise=(0.02, 0.08))
    shares = embed(shares, field, placement)
    image, label = render(shares, anatomy, scanner)
    air = float(shares[TISSUES.index("outside")].sum())
    if placement.rand() < ZERO_BORDER_SHARE:
        border = [(int(placement.randint(4, 21)),) * 2 for _ in range(2)] + [(0, 0)]
        image, label = np.pad(image, border), np.pad(label, border)
    return Head(image, label, region.name, (air + image.size - shares[0].size) / image.size)


def write_heads_dataset(root: Path, cases: int = 20, seed: int = 0) -> Path:
    """A Decathlon folder of `cases` heads_case volumes and the splits_final.json that holds one
    region of the head out per fold (at least one case per region: cases >= len(REGIONS))."""
    if cases < len(REGIONS):
        raise ValueError(f"a heads dataset needs a case in each of its {len(REGIONS)} regions: cases >= {len(REGIONS)}")
    names = [f"heads_{i:03d}" for i in range(cases)]
    for i, name in enumerate(names):
        head = heads_case(i, seed)
        write_case(root, name, [head.image], head.label, affine_for(SPACING, "RAS", head.image.shape))
    folds = [[name for i, name in enumerate(names) if i % len(REGIONS) == k] for k in range(len(REGIONS))]
    splits = [{"train": sorted(set(names) - set(val)), "val": val} for val in folds]
    (root / "splits_final.json").write_text(json.dumps(splits, indent=1))
    return write_dataset_json(root, "decathlon", CLASS_NAMES, ["T1"], names, name="Heads")
