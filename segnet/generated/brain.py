"""A generated brain-MRI-like tissue task: grey and white matter, folded, with partial volume.

Each case is a T1-like head, axial slices through the cerebrum: scalp (bright), skull (dark),
cerebrospinal fluid around the brain, in the sulci and in two ventricles (dark), a cortical ribbon
of grey matter GREY_MM thick along every surface the fluid touches, deep grey nuclei beside the
ventricles, and white matter in between. The anatomy is drawn on a grid SUPERSAMPLE times finer
in every axis and averaged down, so that a voxel on a tissue boundary holds a mixture of both
tissues' intensities (partial volume, what makes the grey-white boundary hard); the label is the
tissue with the largest share of the voxel. The image is then multiplied by a smooth bias field,
blurred by a point-spread function and given Gaussian noise, as a scanner would. Slices of one
case are one anatomy (the folds move slowly with height), so the case is a volume: train it in 2D
(data.spatial_dims=2). Each case is a function of its seed.

Every case of write_brain_dataset comes from one scanner (DEFAULT_SCANNER). With
scanner_variation=True each case comes from its own (draw_scanner), as the cases of a real
multi-site dataset do: its own intensity scale (arbitrary units, decades apart), tissue contrast
(a gamma on the T1 values: other sequence timings), bias field strength and noise level, written
as scanners write them: a magnitude image (Rician noise, never negative) in integers, so that
where the noise is small against the scale's unit the air around the head is exactly zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import ndimage

from segnet.generated.phantom import affine_for, write_case, write_dataset_json

SUPERSAMPLE = 4
GREY_MM = 2.5  # cortical thickness
SULCUS_MM = 1.2  # width of the fluid in a sulcus
BLUR = 0.5  # voxels: the point-spread function's standard deviation
CLASS_NAMES = ("background", "grey_matter", "white_matter")
TISSUES = ("outside", "scalp", "skull", "fluid", "grey", "white")
T1 = {"outside": 0.0, "scalp": 0.65, "skull": 0.12, "fluid": 0.22, "grey": 0.52, "white": 0.78}


@dataclass(frozen=True)
class Scanner:
    """How a scanner renders the T1 values: image = gain * (blur(T1 ** gamma * bias field) + noise),
    the noise Gaussian, or with `magnitude` Rician (the modulus of complex Gaussian noise added to
    the signal) and the image rounded to integers."""

    gain: float = 1.0  # arbitrary units per T1 unit
    gamma: float = 1.0  # tissue contrast: below 1 flattens it towards the bright end, above 1 stretches it
    bias: float = 0.12  # the bias field's largest gain along each axis, +- this share
    noise: float = 0.045  # the noise's standard deviation (of each complex part), in T1 units
    magnitude: bool = False


DEFAULT_SCANNER = Scanner()


def draw_scanner(state: np.random.RandomState, log_gain: tuple[float, float] = (1.0, 3.5),
                 noise: tuple[float, float] = (0.01, 0.09)) -> Scanner:
    """One scanner of a multi-site dataset: gain 10 ** log_gain (10 to 3000), gamma 0.6 to 1.7
    (log-uniform), bias field up to +-5 to 35 %, noise `noise` (0.01 to 0.09); a magnitude image
    in integers."""
    gain, gamma = 10 ** state.uniform(*log_gain), np.exp(state.uniform(np.log(0.6), np.log(1.7)))
    return Scanner(gain=float(gain), gamma=float(gamma), bias=float(state.uniform(0.05, 0.35)),
                   noise=float(state.uniform(*noise)), magnitude=True)


def _tissue_map(
    shape: tuple[int, int, int], spacing: tuple[float, float, float], state: np.random.RandomState,
    z_centre: float = 0.0, top_mm: float | None = None,
) -> np.ndarray:
    """The tissue index (into TISSUES) of every voxel of the fine grid of a volume of `shape` voxels
    whose middle slice lies `z_centre` mm above the head's middle. With `top_mm` the brain ends
    there in a dome (the fluid, skull and scalp over it as shells of their thickness), so slices
    above it show the brain's tip, then the scalp's, then air; else the head narrows away from its
    middle but never ends."""
    fine_spacing = np.asarray(spacing) / SUPERSAMPLE
    axes = [(np.arange(n * SUPERSAMPLE) + 0.5) * fine - n * step / 2
            for n, fine, step in zip(shape, fine_spacing, spacing, strict=True)]
    axes[2] = axes[2] + z_centre
    x, y = np.meshgrid(axes[0], axes[1], indexing="ij")
    centre = state.uniform(-3, 3, 2)
    x, y = x - centre[0], y - centre[1]
    angle, radius = np.arctan2(y, x), np.hypot(x, y)
    semi = state.uniform(0.9, 1.05) * np.array([36.0, 30.0])  # the brain's outline, mm
    shape_phase = state.uniform(0, 2 * np.pi, 2)
    gyri = state.randint(14, 20)
    sulci = np.sort(state.uniform(0, 2 * np.pi, gyri))
    sulcus_depth = state.uniform(6.0, 12.0, gyri)
    twist = state.uniform(-0.02, 0.02, gyri)  # radians per mm of height: folds move between slices
    ventricle = state.uniform(0.8, 1.2, 2) * np.array([4.0, 12.0])
    fine = np.zeros((*x.shape, len(axes[2])), np.uint8)
    wobble = 1 + 0.04 * np.sin(2 * angle + shape_phase[0]) + 0.03 * np.sin(3 * angle + shape_phase[1])

    def outline(z: float, grown: float = 0.0) -> np.ndarray:
        """The radius (mm, in each direction) of the surface `grown` mm outside the brain's at height z;
        on the dome, an ellipsoid's whose semi-axes (its top among them) are the brain's grown by that."""
        if top_mm is not None and z > 0:
            a, b = (semi + grown) * np.sqrt(max(1 - (z / (top_mm + grown)) ** 2, 0.0))
        else:
            a, b = semi * np.sqrt(max(1 - (z / 70.0) ** 2, 0.3))  # the head narrows away from its middle
        if a == 0:
            return np.full_like(angle, -np.inf)
        return a * b / np.hypot(b * np.cos(angle), a * np.sin(angle)) * wobble

    for k, z in enumerate(axes[2]):
        depth = outline(z) - radius  # mm inside the brain's surface
        if top_mm is not None and z > 0:
            shells = {mm: radius <= outline(z, mm) for mm in (2.5, 6.0, 9.0)}
        else:
            shells = {mm: depth >= -mm for mm in (2.5, 6.0, 9.0)}
        fluid = (depth < 0) & shells[2.5]
        gap = (angle[..., None] - sulci - twist * z + np.pi) % (2 * np.pi) - np.pi  # to each sulcus, radians
        in_sulcus = (np.abs(gap) * radius[..., None] < SULCUS_MM / 2) & (depth[..., None] < sulcus_depth)
        fluid |= in_sulcus.any(-1) & (depth >= 0)
        ventricles = ((x / ventricle[0]) ** 2 + ((np.abs(y) - 8) / ventricle[1]) ** 2 <= 1) & (np.abs(z) < 25)
        fluid |= ventricles
        brain = (depth >= 0) & ~fluid
        to_fluid = ndimage.distance_transform_edt(~fluid, sampling=fine_spacing[:2])
        nuclei = ((x / 5.0) ** 2 + ((np.abs(y) - 15) / 6.0) ** 2 <= 1) & (np.abs(z) < 20)
        grey = brain & ((to_fluid < GREY_MM) | nuclei)
        tissue = np.zeros(x.shape, np.uint8)
        tissue[~shells[2.5] & shells[6.0]] = TISSUES.index("skull")
        tissue[~shells[6.0] & shells[9.0]] = TISSUES.index("scalp")
        tissue[fluid] = TISSUES.index("fluid")
        tissue[brain] = TISSUES.index("white")
        tissue[grey] = TISSUES.index("grey")
        fine[..., k] = tissue
    return fine


def tissue_shares(
    shape: tuple[int, int, int], spacing: tuple[float, float, float], state: np.random.RandomState, **anatomy,
) -> np.ndarray:
    """(len(TISSUES), *shape): the share of each voxel every tissue covers (partial volume);
    `anatomy`: where the slices lie and whether the head ends (_tissue_map's z_centre, top_mm)."""
    fine = _tissue_map(shape, spacing, state, **anatomy)
    blocks = fine.reshape(shape[0], SUPERSAMPLE, shape[1], SUPERSAMPLE, shape[2], SUPERSAMPLE)
    return np.stack([(blocks == t).mean(axis=(1, 3, 5)) for t in range(len(TISSUES))])


def render(shares: np.ndarray, state: np.random.RandomState, scanner: Scanner) -> tuple[np.ndarray, np.ndarray]:
    """(image float32, label uint8: 0 background, 1 grey matter, 2 white matter) of tissue shares
    as `scanner` renders them."""
    shape = shares.shape[1:]
    intensity = (np.array([T1[t] for t in TISSUES]) * state.uniform(0.95, 1.05, len(TISSUES))) ** scanner.gamma
    image = np.tensordot(intensity, shares, axes=1)
    grid = np.stack(np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij"))
    bias = 1 + np.tensordot(state.uniform(-scanner.bias, scanner.bias, 3), grid, axes=1)  # a smooth gain
    image = ndimage.gaussian_filter(image * bias, (BLUR, BLUR, 0)) + state.normal(0, scanner.noise, shape)
    if scanner.magnitude:
        image = np.round(np.hypot(image, state.normal(0, scanner.noise, shape)) * scanner.gain)
    else:
        image = image * scanner.gain
    grey, white = TISSUES.index("grey"), TISSUES.index("white")
    winner = shares.argmax(axis=0)
    label = np.where(winner == grey, 1, np.where(winner == white, 2, 0)).astype(np.uint8)
    return image.astype(np.float32), label


def brain_case(
    shape: tuple[int, int, int] = (96, 96, 6), spacing: tuple[float, float, float] = (1.0, 1.0, 4.0),
    state: np.random.RandomState | None = None, scanner: Scanner = DEFAULT_SCANNER,
) -> tuple[np.ndarray, np.ndarray]:
    """(image float32, label uint8) of one head, as `scanner` renders it (render)."""
    state = state if state is not None else np.random.RandomState(0)
    return render(tissue_shares(shape, spacing, state), state, scanner)


def write_brain_dataset(root: Path, cases: int = 40, seed: int = 0, scanner_variation: bool = False) -> Path:
    """A Decathlon folder of `cases` heads of brain_case (1 x 1 mm in plane, 4 mm slices): from one
    scanner, or with scanner_variation each from its own (drawn apart from the anatomy, so the
    heads are the same either way)."""
    names = [f"brain_{i:03d}" for i in range(cases)]
    spacing = (1.0, 1.0, 4.0)
    for i, name in enumerate(names):
        case_seed = (seed * 1_000_003 + i) % 2**32
        scanner = draw_scanner(np.random.RandomState(case_seed ^ 0x5CA2)) if scanner_variation else DEFAULT_SCANNER
        image, label = brain_case(spacing=spacing, state=np.random.RandomState(case_seed), scanner=scanner)
        write_case(root, name, [image], label, affine_for(spacing, "RAS", image.shape))
    return write_dataset_json(root, "decathlon", CLASS_NAMES, ["T1"], names, name="Brain")
