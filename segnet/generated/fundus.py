"""A generated natural-image task: RGB photographs of thin vessels on a textured background, as a
fundus camera takes them, written as nnU-Net v2's natural-image layout (one RGB PNG per case,
imagesTr/{case}_0000.png with channels R, G, B; labelsTr/{case}.png, 8-bit).

The vessels are the hard task's tubes (segnet.generated.hard: smooth random curves 1 to 2 pixels
wide, drawn on a finer grid and averaged down, so an edge pixel holds the share it covers), darker
and redder than the background where they cover a pixel. The background is an orange disc under
an uneven illumination, textured at two scales in every channel (smoothed noise), stored in 8 bits: what sets the
vessels apart is their colour and their shape, not a threshold.
Each image is a function of its seed only.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

from segnet.generated.hard import BLUR, hard_shares

CLASS_NAMES = ("background", "vessel")
CHANNELS = ("R", "G", "B")
BACKGROUND_RGB = np.array([0.78, 0.42, 0.22])  # an orange fundus
VESSEL_RGB = np.array([0.62, 0.27, 0.14])  # darker, redder


def texture(size: int, state: np.random.RandomState) -> np.ndarray:
    """(size, size, 3): smoothed noise at a coarse and a fine scale in each channel, about 0.1 wide."""
    coarse = ndimage.gaussian_filter(state.normal(0, 1, (size, size, 3)), (size / 12, size / 12, 0))
    fine = ndimage.gaussian_filter(state.normal(0, 1, (size, size, 3)), (1.5, 1.5, 0))
    return 0.06 * coarse / (coarse.std() + 1e-8) + 0.04 * fine / (fine.std() + 1e-8)


def fundus_image(size: int, state: np.random.RandomState, vessels: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """(RGB uint8 (size, size, 3), label uint8 (size, size): 0 background, 1 vessel)."""
    share = hard_shares(size, state, tubes=vessels, rings=0)[1]
    yy, xx = (np.mgrid[:size, :size] + 0.5) / size - 0.5
    disc = np.hypot(yy, xx) < 0.48  # the camera's round field of view: nothing is seen outside it
    label = ((share >= 0.5) & disc).astype(np.uint8)
    cover = ndimage.gaussian_filter(share, BLUR)[..., None]
    centre = state.uniform(-0.15, 0.15, 2)
    light = 1.0 - 0.8 * ((yy - centre[0]) ** 2 + (xx - centre[1]) ** 2)  # brighter in the middle
    colour = BACKGROUND_RGB * (1 - cover) + VESSEL_RGB * cover + texture(size, state)
    image = np.clip(colour * (light * disc)[..., None] + state.normal(0, 0.02, colour.shape), 0, 1)
    return np.round(image * 255).astype(np.uint8), label


def write_fundus_dataset(root: Path, cases: int = 40, size: int = 96, seed: int = 0) -> Path:
    """An nnU-Net v2 natural-image folder of `cases` RGB PNGs and their 8-bit labels (train it in 2D)."""
    names = [f"fundus_{i:03d}" for i in range(cases)]
    for folder in ("imagesTr", "labelsTr"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        image, label = fundus_image(size, np.random.RandomState((seed * 1_000_003 + i) % 2**32))
        Image.fromarray(image).save(root / "imagesTr" / f"{name}_0000.png")
        Image.fromarray(label).save(root / "labelsTr" / f"{name}.png")
    spec = {"channel_names": dict(enumerate(CHANNELS)), "labels": {n: v for v, n in enumerate(CLASS_NAMES)},
            "numTraining": cases, "file_ending": ".png", "name": "Fundus"}
    (root / "dataset.json").write_text(json.dumps(spec, indent=2))
    return root
