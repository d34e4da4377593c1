"""BatchAugmentation (segnet.data.device_augmentation) against the MONAI worker chain it replaces
(segnet.data.transforms.train_transforms): the same parameter distributions, labels that stay aligned
with their image, the exact identity, MONAI's axis, rotation and scale conventions and intensity
formulas, reproducibility."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from monai import transforms as T
from scipy import stats

from segnet.data.device_augmentation import PROBS, BatchAugmentation, centre_slices, rotation_planes
from segnet.data.transforms import train_transforms

N_DRAWS, P_MIN = 4000, 1e-3
PATCH = {2: [24, 20], 3: [16, 16, 12]}
OFF = dict.fromkeys(PROBS, 0.0)


class RecordUniform:
    """Stands in for a transform's RandomState and keeps what uniform() returned: RandGaussianNoise does not
    store the std it draws."""

    def __init__(self, state):
        self.state, self.drawn = state, []

    def uniform(self, *args, **kwargs):
        self.drawn.append(self.state.uniform(*args, **kwargs))
        return self.drawn[-1]

    def __getattr__(self, name):
        return getattr(self.state, name)


# our parameter: (the MONAI transform that draws it, our flag for it, what it stored)
VALUES = {
    "factor": (T.RandScaleIntensityd, "scale_intensity", lambda t: t.scaler.factor),
    "offset": (T.RandShiftIntensityd, "shift_intensity", lambda t: t.shifter._offset),
    "gamma": (T.RandAdjustContrastd, "contrast", lambda t: t.adjuster.gamma_value),
    "bias_coeff": (T.RandBiasFieldd, "bias_field", lambda t: t.rand_bias_field._coeff),
    "noise_std": (T.RandGaussianNoised, "noise", lambda t: t.rand_gaussian_noise.R.drawn[-1]),
}


@functools.cache
def monai_draws(spatial_dims: int) -> dict[str, np.ndarray]:
    """The worker chain's random transforms after the crop, run N_DRAWS times on a dummy crop: their flags
    (`_do_transform`) and the values they drew when they applied."""
    chain = train_transforms([4] * spatial_dims, spatial_dims, samples_per_volume=1).transforms
    after_crop = chain[1 + [type(t) for t in chain].index(T.RandCropByPosNegLabeld):]
    steps = [t for t in after_crop if isinstance(t, T.RandomizableTransform)]
    for seed, step in enumerate(steps):
        step.set_random_state(seed)
    (affine,) = [t for t in steps if isinstance(t, T.RandAffined)]
    flips = [t for t in steps if isinstance(t, T.RandFlipd)]
    by_type = {type(t): t for t in steps}
    noise = by_type[T.RandGaussianNoised].rand_gaussian_noise
    noise.R = RecordUniform(noise.R)
    draws = {name: [] for name in ["affine", "rotate", "scale", "flip", *VALUES, *(v[1] for v in VALUES.values())]}
    for _ in range(N_DRAWS):
        data = {"image": torch.rand(1, *[4] * spatial_dims),
                "label": torch.zeros(1, *[4] * spatial_dims, dtype=torch.long)}
        for step in steps:
            data = step(data)
        grid = affine.rand_affine.rand_affine_grid  # drawn on every call, used where _do_transform
        draws["affine"].append(affine._do_transform)
        draws["rotate"].append(grid.rotate_params)
        draws["scale"].append(grid.scale_params)
        draws["flip"].append([f._do_transform for f in flips])
        for name, (kind, flag, stored) in VALUES.items():
            draws[flag].append(by_type[kind]._do_transform)
            if by_type[kind]._do_transform:
                draws[name].append(stored(by_type[kind]))
    return {name: np.asarray(values, dtype=float) for name, values in draws.items()}


def p_values(aug: BatchAugmentation, theirs: dict[str, np.ndarray], seed: int = 0) -> dict[str, float]:
    """Per flag a chi-square test of the two 2x2 counts, per value column a two-sample KS test."""
    ours = aug.draw(N_DRAWS, torch.Generator().manual_seed(seed))
    assert set(ours) == set(theirs)
    out = {}
    for name, values in theirs.items():
        a, b = ours[name].double().reshape(N_DRAWS, -1).numpy(), values.reshape(len(values), -1)
        assert a.shape[1] == b.shape[1], f"{name}: {a.shape[1]} parameters, MONAI draws {b.shape[1]}"
        for col in range(a.shape[1]):
            if ours[name].dtype == torch.bool:
                table = [[a[:, col].sum(), (1 - a[:, col]).sum()], [b[:, col].sum(), (1 - b[:, col]).sum()]]
                out[f"{name}[{col}]"] = stats.chi2_contingency(table).pvalue
            else:
                out[f"{name}[{col}]"] = stats.ks_2samp(a[:, col], b[:, col]).pvalue
    return out


@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_parameters_are_distributed_as_the_worker_chain_draws_them(spatial_dims):
    p = p_values(BatchAugmentation(spatial_dims, PATCH[spatial_dims]), monai_draws(spatial_dims))
    assert min(p.values()) > P_MIN, {name: value for name, value in p.items() if value <= P_MIN}


def test_a_wrong_distribution_fails_the_comparison():
    theirs = monai_draws(3)
    wide = p_values(BatchAugmentation(3, PATCH[3], rotate_range=math.pi / 10), theirs)
    assert all(wide[f"rotate[{i}]"] < P_MIN for i in range(3)) and wide["scale[0]"] > P_MIN
    rarer = p_values(BatchAugmentation(3, PATCH[3], probs={"contrast": 0.25}), theirs)
    assert rarer["contrast[0]"] < P_MIN and rarer["noise[0]"] > P_MIN


def crops(spatial_dims, n=3, channels=2, seed=0, dtype=torch.long):
    aug = BatchAugmentation(spatial_dims, PATCH[spatial_dims])
    g = torch.Generator().manual_seed(seed)
    image = torch.randn(n, channels, *aug.in_size, generator=g)
    return aug, image, torch.randint(0, 3, (n, 1, *aug.in_size), generator=g).to(dtype)


def forced(aug, n, **values):
    """Parameters with every transform off, no rotation and unit scale, but the values given (per sample,
    or one for all samples)."""
    params = BatchAugmentation(aug.spatial_dims, aug.patch_size, probs=OFF).draw(n, torch.Generator())
    params["rotate"].zero_(), params["scale"].fill_(1.0)
    for name, value in values.items():
        params[name] = torch.as_tensor(value, dtype=params[name].dtype).expand_as(params[name]).clone()
    return params


def phantom(spatial_dims, n=4, seed=0):
    """Channel 0: four smooth blobs per sample; channel 1: its negative; label 1 above 0.5, 2 above 1.5."""
    patch = {2: [48, 40], 3: [32, 32, 24]}[spatial_dims]
    aug = BatchAugmentation(spatial_dims, patch, probs={**OFF, "affine": 1.0, "flip": 0.5})
    g = torch.Generator().manual_seed(seed)
    axes = torch.meshgrid(*[torch.arange(s, dtype=torch.float32) for s in aug.in_size], indexing="ij")
    intensity = torch.zeros(n, *aug.in_size)
    for _ in range(4):
        centre = (0.3 + 0.4 * torch.rand(n, spatial_dims, generator=g)) * torch.tensor(aug.in_size)
        distance2 = sum((x - c.view(-1, *[1] * spatial_dims)) ** 2 for x, c in zip(axes, centre.T, strict=True))
        intensity += (1 + 1.5 * torch.rand(n, *[1] * spatial_dims, generator=g)) * torch.exp(-distance2 / 72)
    label = ((intensity > 0.5).int() + (intensity > 1.5).int()).to(torch.uint8)[:, None]
    return aug, torch.stack([intensity, -intensity], 1), label


@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_labels_stay_integers_aligned_with_their_image(spatial_dims):
    aug, image, label = phantom(spatial_dims)
    params = aug.draw(len(image), torch.Generator().manual_seed(1))
    out_image, out_label = aug.apply(image, label, params, torch.Generator())
    assert out_label.dtype == torch.uint8 and set(out_label.unique().tolist()) <= set(label.unique().tolist())
    assert not torch.equal(out_label, label[centre_slices(aug.in_size, aug.patch_size)])
    expected = ((out_image[:, :1] > 0.5).int() + (out_image[:, :1] > 1.5).int()).to(torch.uint8)
    assert (out_label == expected).float().mean() > 0.95
    # The label comes from the nearest input voxel, at most sqrt(d)/2 voxels from where the intensity is
    # interpolated: they agree wherever the intensity is further from both thresholds than that times its
    # steepest slope (plus a little for the interpolation's own error).
    slope = torch.stack(torch.gradient(image[:, 0], dim=tuple(range(1, spatial_dims + 1)))).norm(dim=0).max()
    distance = torch.minimum((out_image[:, :1] - 0.5).abs(), (out_image[:, :1] - 1.5).abs())
    far = distance > slope * math.sqrt(spatial_dims) / 2 + 0.05
    assert torch.equal(out_label[far], expected[far]) and set(out_label[far].tolist()) == {0, 1, 2}
    torch.testing.assert_close(out_image[:, 1], -out_image[:, 0])  # channels move together
    intensities = dict(params, **{name: torch.ones_like(params[name]) for name in
                                  ["scale_intensity", "shift_intensity", "contrast", "bias_field", "noise"]})
    noisy_image, same_label = aug.apply(image, label, intensities, torch.Generator())
    assert torch.equal(same_label, out_label) and not torch.allclose(noisy_image, out_image)


@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_rotation_and_scaling_only_sample_inside_the_input(spatial_dims):
    """A constant image stays constant at the extreme angles and scales: no zero padding is sampled."""
    aug = BatchAugmentation(spatial_dims, PATCH[spatial_dims])
    grid = torch.linspace(-aug.rotate_range, aug.rotate_range, 5)
    planes = 1 if spatial_dims == 2 else 3
    angles = torch.cartesian_prod(*[grid] * planes).reshape(len(grid) ** planes, -1)
    params = forced(aug, len(angles), affine=True, rotate=angles, scale=1 + aug.scale_range)
    ones = torch.ones(len(angles), 1, *aug.in_size)
    out, _ = aug.apply(ones, ones.long(), params, torch.Generator())
    torch.testing.assert_close(out, torch.ones_like(out), rtol=0, atol=1e-5)


@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_nothing_drawn_is_the_centre_crop_exactly(spatial_dims):
    aug, image, label = crops(spatial_dims)
    out_image, out_label = BatchAugmentation(spatial_dims, aug.patch_size, probs=OFF)(image, label, torch.Generator())
    crop = centre_slices(aug.in_size, aug.patch_size)
    assert torch.equal(out_image, image[crop]) and torch.equal(out_label, label[crop])


@pytest.mark.parametrize("spatial_dims, axis", [(2, 0), (3, 0), (3, 1), (3, 2)])
def test_a_quarter_turn_is_rot90_of_the_centre_crop(spatial_dims, axis):
    aug = BatchAugmentation(spatial_dims, [16] * spatial_dims)  # square, so the turned patch keeps its shape
    g = torch.Generator().manual_seed(0)
    image, label = torch.randn(2, 2, *aug.in_size, generator=g), torch.randint(0, 5, (2, 1, *aug.in_size), generator=g)
    rotate = torch.zeros(1 if spatial_dims == 2 else 3)
    rotate[axis] = math.pi / 2
    out_image, out_label = aug.apply(image, label, forced(aug, 2, affine=True, rotate=rotate), g)
    # MONAI samples output x at R x: a quarter turn in plane (i, j) is rot90 from axis j towards axis i
    i, j = rotation_planes(spatial_dims)[axis]
    crop = centre_slices(aug.in_size, aug.patch_size)
    torch.testing.assert_close(out_image, torch.rot90(image[crop], 1, dims=(2 + j, 2 + i)), rtol=0, atol=1e-4)
    assert torch.equal(out_label, torch.rot90(label[crop], 1, dims=(2 + j, 2 + i)))


@pytest.mark.parametrize("rotate", [False, True])
@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_rotation_and_scaling_match_monai_affine(spatial_dims, rotate):
    aug, image, label = crops(spatial_dims)
    angles = [0.2, -0.15, 0.1][: 1 if spatial_dims == 2 else 3] if rotate else [0.0] * (1 if spatial_dims == 2 else 3)
    scales = [1.15, 0.85, 1.05][:spatial_dims]  # > 1 zooms out, < 1 in
    params = forced(aug, len(image), affine=True, rotate=angles, scale=scales)
    out_image, out_label = aug.apply(image, label, params, torch.Generator())
    crop = centre_slices(aug.in_size, aug.patch_size)[1:]
    for n in range(len(image)):  # RandAffined resamples the whole crop about its centre; we keep the centre
        affine = T.Affine(rotate_params=angles, scale_params=scales, padding_mode="zeros", image_only=True)
        torch.testing.assert_close(out_image[n], affine(image[n])[crop].as_tensor(), rtol=0, atol=1e-4)
        monai_label = affine(label[n].float(), mode="nearest")[crop].as_tensor()
        assert (out_label[n] == monai_label).float().mean() > 0.999  # ties may round either way


@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_intensity_transforms_follow_monai_formulas(spatial_dims):
    aug, image, label = crops(spatial_dims, n=2)
    coeff = torch.linspace(0.0, 0.3, len(aug.draw(1, torch.Generator())["bias_coeff"][0]))
    values = {"factor": [0.08, -0.05], "offset": [-0.1, 0.03], "gamma": [0.7, 1.4], "bias_coeff": coeff}
    flags = dict.fromkeys(["scale_intensity", "shift_intensity", "contrast", "bias_field"], True)
    out, _ = aug.apply(image, label, forced(aug, 2, **flags, **values), torch.Generator())
    for n, sample in enumerate(image[centre_slices(aug.in_size, aug.patch_size)]):
        sample = T.ScaleIntensity(minv=None, maxv=None, factor=values["factor"][n])(sample)
        sample = T.ShiftIntensity(values["offset"][n])(sample)
        sample = T.AdjustContrast(values["gamma"][n])(sample)
        bias = T.RandBiasField(prob=1.0)
        bias._coeff = coeff.tolist()
        torch.testing.assert_close(out[n], torch.as_tensor(bias(sample, randomize=False)), rtol=1e-5, atol=1e-5)
    aug = BatchAugmentation(spatial_dims, [64] * spatial_dims)
    image = torch.zeros(2, 1, *aug.in_size)
    params = forced(aug, 2, noise=True, noise_std=0.05)
    noisy, _ = aug.apply(image, image.long(), params, torch.Generator().manual_seed(0))
    assert abs(noisy.std().item() - 0.05) < 0.002 and abs(noisy.mean().item()) < 0.002


@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_seeded_runs_reproduce_on_cpu(spatial_dims):
    aug, image, label = crops(spatial_dims, n=3, channels=2)
    first, again, other = (aug(image, label, torch.Generator().manual_seed(seed)) for seed in (7, 7, 8))
    assert first[0].shape == (3, 2, *aug.patch_size) and first[1].shape == (3, 1, *aug.patch_size)
    assert first[0].dtype == torch.float32 and first[1].dtype == torch.long
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])


@pytest.mark.cuda
def test_the_gpu_applies_what_the_cpu_does():
    aug, image, label = crops(3)
    params = aug.draw(len(image), torch.Generator().manual_seed(0))
    params["noise"][:] = False  # the noise comes from each device's own generator
    on_cpu = aug.apply(image, label, params, torch.Generator())
    on_gpu = aug.apply(image.cuda(), label.cuda(), params, torch.Generator("cuda"))
    torch.testing.assert_close(on_gpu[0].cpu(), on_cpu[0], rtol=1e-4, atol=1e-4)
    assert (on_gpu[1].cpu() == on_cpu[1]).float().mean() > 0.999


def test_the_no_affine_recipe_leaves_out_rotation_and_scaling_in_workers_and_on_the_device():
    from omegaconf import OmegaConf

    from helpers.training import compose_config, tiny_overrides
    from segnet.data.transforms import augmentation_transforms
    from segnet.training.module import SegmentationModule

    def kinds(chain):
        return [type(t) for t in chain]

    assert T.RandAffined in kinds(augmentation_transforms(2))
    without = kinds(augmentation_transforms(2, affine=False))
    assert T.RandAffined not in without and without == [k for k in kinds(augmentation_transforms(2))
                                                        if k is not T.RandAffined]
    assert T.RandAffined not in kinds(train_transforms([8, 8], 2, 1, affine=False).transforms)
    cfg = compose_config(tiny_overrides())
    sections = {key: OmegaConf.to_container(cfg[key], resolve=True)
                for key in ("model", "data", "optim", "inference", "loss")}
    sections["data"].update(augment_on="device", patch_size=[32, 32])
    assert SegmentationModule(**sections, backend="python").augmentation.probs["affine"] == PROBS["affine"] > 0
    sections["data"]["affine_augmentation"] = False
    assert SegmentationModule(**sections, backend="python").augmentation.probs["affine"] == 0.0
