"""Training augmentation on the training device, a whole batch at a time.

segnet.data.transforms.train_transforms augments every crop in the DataLoader workers with MONAI, about
0.5 s of CPU per 128^3 crop. BatchAugmentation draws the same parameters from the same distributions and
applies them with torch to a batch on whatever device it is on. The workers read a larger crop
(`BatchAugmentation.input_size`) so that rotation and scaling only ever sample real voxels, and the
module returns its centre `patch_size`. Conventions follow MONAI's own code (monai/transforms:
AffineGrid, create_rotate, create_scale, Resample, RandFlip, ScaleIntensity, ShiftIntensity,
AdjustContrast, RandBiasField, RandGaussianNoise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from segnet.data.samples import MOVED_WITH_LABEL

# The worker chain's settings. tests/data/test_device_augmentation.py draws from the MONAI transforms
# that train_transforms builds and compares distributions, so a change made there alone fails it.
PROBS = {"affine": 0.2, "flip": 0.5, "scale_intensity": 0.5, "shift_intensity": 0.5, "contrast": 0.3,
         "bias_field": 0.5, "noise": 0.2}
ROTATE_RANGE = math.pi / 12  # radians, uniform in +-range about every axis (one angle in 2D)
SCALE_RANGE = 0.15  # per axis 1 + uniform(+-range); MONAI samples at scale * position, so > 1 zooms out
INTENSITY_FACTOR = 0.1  # image * (1 + uniform(+-factor))
INTENSITY_OFFSET = 0.1  # image + uniform(+-offset)
GAMMA_RANGE = (0.7, 1.5)
BIAS_COEFF_RANGE = (0.0, 0.3)  # every Legendre coefficient, the constant term included
BIAS_DEGREE = 3
NOISE_STD = 0.05  # the std itself is uniform in (0, NOISE_STD), as RandGaussianNoise(sample_std=True)
CONTRAST_EPSILON = 1e-7  # AdjustContrast's


def rotation_planes(spatial_dims: int) -> list[tuple[int, int]]:
    """The (i, j) plane of each factor of MONAI's create_rotate, left to right in its product: in 3D
    R = Rx(a0) @ Ry(a1) @ Rz(a2) (rotate_order "XYZ"), Rx turning plane (1, 2), Ry (2, 0), Rz (0, 1)."""
    return [(0, 1)] if spatial_dims == 2 else [(1, 2), (2, 0), (0, 1)]


def affine_matrices(rotate: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(n, d, d) A = R @ S as AffineGrid composes it (no shear or translation): the input position,
    in voxels from the centre, that output position x samples is A x."""
    n, dims = scale.shape
    matrix = torch.eye(dims, device=scale.device).repeat(n, 1, 1)
    for angle, (i, j) in zip(rotate.T, rotation_planes(dims), strict=True):
        plane = torch.eye(dims, device=scale.device).repeat(n, 1, 1)
        plane[:, i, i], plane[:, i, j] = angle.cos(), -angle.sin()
        plane[:, j, i], plane[:, j, j] = angle.sin(), angle.cos()
        matrix = matrix @ plane
    return matrix * scale[:, None, :]  # R @ diag(s) scales the columns


def centre_slices(in_size: Sequence[int], patch_size: Sequence[int]) -> tuple[slice, ...]:
    spatial = (slice((i - p) // 2, (i - p) // 2 + p) for i, p in zip(in_size, patch_size, strict=True))
    return (slice(None), slice(None), *spatial)


def rotate_scale(image, label, drawn, rotate, scale, patch_size, maps=None):
    """The centre patch of each sample, rotated and scaled about its centre where `drawn`; `maps`
    ({name: (N, K, *input_size)}, the label's derived maps) by the same grid, each by its
    MOVED_WITH_LABEL. Returns image, label and the maps."""
    maps = maps or {}
    crop = centre_slices(image.shape[2:], patch_size)
    out_image, out_label = image[crop].clone(), label[crop].clone()
    out_maps = {name: value[crop].clone() for name, value in maps.items()}
    if not drawn.any():  # one host sync per batch; resampling only the drawn 20% is worth it
        return out_image, out_label, out_maps
    # affine_grid (align_corners=False) works in coordinates that run from -1 to 1 over a whole axis, so a
    # position x voxels from the centre is 2x/size: theta = diag(2 / in) A diag(patch / 2). Its axes go
    # last spatial first (x is W), hence the flip.
    to_input = torch.tensor([2.0 / s for s in image.shape[2:]], device=image.device)
    from_patch = torch.tensor([p / 2.0 for p in patch_size], device=image.device)
    theta = (to_input[:, None] * affine_matrices(rotate[drawn], scale[drawn]) * from_patch).flip(1, 2)
    theta = F.pad(theta, (0, 1))  # no translation
    grid = F.affine_grid(theta, [len(theta), 1, *patch_size], align_corners=False).to(image.dtype)
    # input_size keeps every sample inside the input, so the zero padding RandAffined asks for never shows
    out_image[drawn] = F.grid_sample(image[drawn], grid, "bilinear", "zeros", align_corners=False)
    labels = F.grid_sample(label[drawn].to(grid.dtype), grid, "nearest", "zeros", align_corners=False)
    out_label[drawn] = labels.to(label.dtype)
    for name, value in maps.items():
        mode = MOVED_WITH_LABEL[name]
        out_maps[name][drawn] = F.grid_sample(value[drawn].to(grid.dtype), grid, mode, "zeros",
                                              align_corners=False).to(value.dtype)
    return out_image, out_label, out_maps


def per_sample(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return values.view(-1, *[1] * (like.ndim - 1))


def flip(x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    """RandFlip about each spatial axis where flags[:, axis]."""
    for axis in range(flags.shape[1]):
        x = torch.where(per_sample(flags[:, axis], x), x.flip(2 + axis), x)
    return x


def adjust_contrast(image: torch.Tensor, applied: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """AdjustContrast: gamma on the sample rescaled to [0, 1] by its min and range over all channels."""
    low = image.amin(dim=tuple(range(1, image.ndim)), keepdim=True)
    span = image.amax(dim=tuple(range(1, image.ndim)), keepdim=True) - low
    adjusted = ((image - low) / (span + CONTRAST_EPSILON)) ** per_sample(gamma, image) * span + low
    return torch.where(per_sample(applied, image), adjusted, image)


def legendre(x: torch.Tensor, degree: int) -> torch.Tensor:
    """(degree + 1, len(x)): P_0 .. P_degree at x, by Bonnet's recursion."""
    p = [torch.ones_like(x), x]
    for k in range(1, degree):
        p.append(((2 * k + 1) * x * p[k] - k * p[k - 1]) / (k + 1))
    return torch.stack(p[: degree + 1])


def bias_terms(spatial_dims: int, degree: int = BIAS_DEGREE) -> list[tuple[int, ...]]:
    """The Legendre degrees per axis of RandBiasField's terms, in its coefficient order. In 2D MONAI fills
    the lower triangle of the coefficient matrix (j <= i: P_3(x) P_3(y) is in, P_0(x) P_1(y) is not); in
    3D every term of total degree <= degree."""
    if spatial_dims == 2:
        return [(i, j) for i in range(degree + 1) for j in range(i + 1)]
    return [(i, j, k) for i in range(degree + 1) for j in range(degree + 1 - i) for k in range(degree + 1 - i - j)]


def bias_field(coeff: torch.Tensor, shape: Sequence[int], degree: int = BIAS_DEGREE) -> torch.Tensor:
    """(n, *shape) log bias field: sum of coeff * P_i(x) P_j(y) [P_k(z)], x, y, z from -1 to 1 over the patch."""
    terms = torch.tensor(bias_terms(len(shape), degree), device=coeff.device).T
    matrix = coeff.new_zeros(len(coeff), *[degree + 1] * len(shape))
    matrix[(slice(None), *terms)] = coeff
    bases = [legendre(torch.linspace(-1.0, 1.0, size, device=coeff.device), degree) for size in shape]
    return torch.einsum("nij,ia,jb->nab" if len(shape) == 2 else "nijk,ia,jb,kc->nabc", matrix, *bases)


class BatchAugmentation:
    """MONAI's worker augmentation (train_transforms after the crop), batched on the batch's device."""

    def __init__(self, spatial_dims: int, patch_size: Sequence[int], probs: Mapping[str, float] | None = None,
                 rotate_range: float = ROTATE_RANGE, scale_range: float = SCALE_RANGE):
        if spatial_dims not in (2, 3) or len(patch_size) != spatial_dims:
            raise ValueError(f"spatial_dims must be 2 or 3 with as many patch sizes, got {spatial_dims}, {patch_size}")
        self.spatial_dims, self.patch_size = spatial_dims, list(patch_size)
        self.probs = {**PROBS, **(probs or {})}
        self.rotate_range, self.scale_range = rotate_range, scale_range
        self.in_size = self.input_size(patch_size, spatial_dims, rotate_range, scale_range)

    @staticmethod
    def input_size(patch_size: Sequence[int], spatial_dims: int, rotate_range: float = ROTATE_RANGE,
                   scale_range: float = SCALE_RANGE) -> list[int]:
        """The crop the workers must read: the patch plus the same margin on both sides of each axis.

        Output voxel centres lie within half-extents h = (patch - 1) / 2 of the centre; A = R S samples
        them at R (S x). Scaling keeps S x inside (1 + scale_range) h. A rotation by at most `a` in plane
        (i, j) keeps a box of half-extents b inside the box with b_i' = max over |t| <= a of
        cos(t) b_i + sin|t| b_j, reached at t = min(a, atan2(b_j, b_i)) (b_j' alike); applying the factors
        of R in the order they act on the point bounds the rotated patch (exactly in 2D; in 3D, where a
        rotated box is no box, up to ~9% over: 212 x 224 x 230 for a 128^3 patch, 212 x 218 x 212 at
        best). Bilinear and nearest sampling then read only real voxels if every sample is within
        (input - 1) / 2 of the centre, i.e. margin = ceil(bound - h).
        """
        half = [(1 + scale_range) * (p - 1) / 2 for p in patch_size]
        for i, j in reversed(rotation_planes(spatial_dims)):
            t_i, t_j = min(rotate_range, math.atan2(half[j], half[i])), min(rotate_range, math.atan2(half[i], half[j]))
            half[i], half[j] = (math.cos(t_i) * half[i] + math.sin(t_i) * half[j],
                                math.cos(t_j) * half[j] + math.sin(t_j) * half[i])
        return [p + 2 * math.ceil(b - (p - 1) / 2) for p, b in zip(patch_size, half, strict=True)]

    def draw(self, n: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Per-sample parameters on the generator's device: boolean flags (whether each transform applies,
        `rand() < prob` as RandomizableTransform draws it) and the values, drawn for every sample."""
        def rand(*shape):
            return torch.rand(n, *shape, generator=generator, device=generator.device)

        def uniform(low, high, *shape):
            return low + (high - low) * rand(*shape)

        dims, probs = self.spatial_dims, self.probs
        return {
            "affine": rand() < probs["affine"],
            "rotate": uniform(-self.rotate_range, self.rotate_range, 1 if dims == 2 else 3),
            "scale": uniform(1 - self.scale_range, 1 + self.scale_range, dims),
            "flip": rand(dims) < probs["flip"],
            "scale_intensity": rand() < probs["scale_intensity"],
            "factor": uniform(-INTENSITY_FACTOR, INTENSITY_FACTOR),
            "shift_intensity": rand() < probs["shift_intensity"],
            "offset": uniform(-INTENSITY_OFFSET, INTENSITY_OFFSET),
            "contrast": rand() < probs["contrast"],
            "gamma": uniform(*GAMMA_RANGE),
            "bias_field": rand() < probs["bias_field"],
            "bias_coeff": uniform(*BIAS_COEFF_RANGE, len(bias_terms(dims))),
            "noise": rand() < probs["noise"],
            "noise_std": uniform(0.0, NOISE_STD),
        }

    def __call__(self, image: torch.Tensor, label: torch.Tensor, generator: torch.Generator,
                 maps: Mapping[str, torch.Tensor] | None = None):
        """image (N, C, *input_size) float, label (N, 1, *input_size) integer, any device; the generator
        on the same device (a CPU one works too, at the cost of copying its draws and noise over).
        Returns image (N, C, *patch_size) and label (N, 1, *patch_size) in the label's dtype, and with
        `maps` (the label's derived maps, {name: (N, K, *input_size)}) those moved alike, as a third."""
        return self.apply(image, label, self.draw(len(image), generator), generator, maps)

    def apply(self, image, label, params: Mapping[str, torch.Tensor], generator: torch.Generator,
              maps: Mapping[str, torch.Tensor] | None = None):
        """The augmentation with the given parameters (from `draw`); the generator draws the noise."""
        if list(image.shape[2:]) != self.in_size or label.shape[2:] != image.shape[2:]:
            raise ValueError(
                f"expected crops of {self.in_size}, got image {list(image.shape)}, label {list(label.shape)}"
            )
        p = {name: value.to(image.device) for name, value in params.items()}
        image, label, moved = rotate_scale(image, label, p["affine"], p["rotate"], p["scale"], self.patch_size, maps)
        image, label = flip(image, p["flip"]), flip(label, p["flip"])
        moved = {name: flip(value, p["flip"]) for name, value in moved.items()}
        # unapplied samples get factor 0, offset 0, coefficients 0, std 0: exactly unchanged
        image = image * per_sample(1 + p["factor"] * p["scale_intensity"], image)
        image = image + per_sample(p["offset"] * p["shift_intensity"], image)
        image = adjust_contrast(image, p["contrast"], p["gamma"])
        field = bias_field(p["bias_coeff"] * p["bias_field"][:, None], self.patch_size)
        image = image * field.exp()[:, None].to(image.dtype)  # one field for all channels, as MONAI
        noise = torch.randn(image.shape, generator=generator, device=generator.device, dtype=image.dtype)
        image = image + noise.to(image.device) * per_sample(p["noise_std"] * p["noise"], image)
        return (image, label) if maps is None else (image, label, moved)
