"""Composing the real conf/ tree and running tiny trainings in tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from segnet.config import register_resolvers

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"

# A few seconds per run on 2 CPU cores: tiny images, a 2-level U-Net, one epoch.
TINY_2D = [
    "data.image_size=32", "data.roi_size=[32,32]", "data.radius=[3,8]", "data.num_objects=3",
    "data.num_train=8", "data.num_val=2", "data.batch_size=4",
]
TINY_3D = [
    "data=synthetic3d", "data.image_size=24", "data.roi_size=[16,16,16]", "data.radius=[3,6]",
    "data.num_objects=2", "data.num_train=2", "data.num_val=1", "data.batch_size=1",
]
TINY_MODEL = ["model.channels=[8,16]", "model.strides=[2]"]
TINY_TRAINER = [
    "trainer=cpu", "trainer.max_epochs=1", "trainer.check_val_every_n_epoch=1", "trainer.log_every_n_steps=1",
    "callbacks.step_timer.skip=0", "trainer.enable_model_summary=false", "callbacks.progress_bar.refresh_rate=0",
]


def compose_config(overrides: list[str], output_dir: Path | None = None) -> DictConfig:
    register_resolvers()
    extra = [f"paths.output_dir={output_dir}"] if output_dir is not None else []
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides + extra)


def tiny_overrides(spatial_dims: int = 2) -> list[str]:
    return (TINY_2D if spatial_dims == 2 else TINY_3D) + TINY_MODEL + TINY_TRAINER


def train_tiny_task(tmp_path_factory, *overrides: str) -> tuple[Path, Path]:
    """A tiny Decathlon task on an oblique grid and a tiny model trained on it: (dataset, run folder)."""
    from segnet.training.api import train

    root = write_decathlon(tmp_path_factory.mktemp("data") / "Task", cases=3, affine=OBLIQUE_AFFINE)
    run = tmp_path_factory.mktemp("run")
    train(compose_config(["data=decathlon", f"data.root={root}", "data.num_folds=3", "data.num_workers=0", "op=cpp",
                          *overrides, *TINY_MODEL, *TINY_TRAINER], output_dir=run))
    return root, run


def run_train_script(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """python train.py ARGS as a user would run it (flags such as -m first), its run folder under cwd."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"}
    flags = [a for a in args if a.startswith("-")]
    overrides = [a for a in args if not a.startswith("-")]
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *flags, f"hydra.run.dir={cwd}/run", f"hydra.sweep.dir={cwd}/multirun",
         *overrides],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )


def write_nifti(path: Path, array: np.ndarray, affine: np.ndarray | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(array, np.eye(4) if affine is None else affine), str(path))


def sphere_case(shape=(20, 24, 16), center=None, radius=5, seed=0) -> tuple[np.ndarray, np.ndarray]:
    """A noisy volume with a bright sphere (label 1) and a darker shell around it (label 2)."""
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1)
    center = np.array(center if center is not None else [s // 2 for s in shape])
    distance = np.linalg.norm(grid - center, axis=-1)
    label = np.zeros(shape, np.uint8)
    label[distance <= radius + 2] = 2
    label[distance <= radius] = 1
    image = (100 + 80 * (label == 1) + 40 * (label == 2) + rng.normal(0, 5, shape)).astype(np.float32)
    return image, label


# Anisotropic voxels (2.5 x 0.8 x 1.2 mm) with permuted, flipped axes: far from RAS.
OBLIQUE_AFFINE = np.array([[0, 0, -2.5, 10], [-0.8, 0, 0, 5], [0, 1.2, 0, -3], [0, 0, 0, 1.0]])


def other_scanner(image: np.ndarray, seed: int) -> np.ndarray:
    """The same anatomy from another scanner: other gain and offset, a smooth bias field along
    the first axis, and more noise."""
    rng = np.random.default_rng(1000 + seed)
    bias = np.linspace(0.9, 1.12, image.shape[0])[:, None, None]  # +-10 %, typical of MRI
    return (2.5 * image * bias - 40 + rng.normal(0, 12, image.shape)).astype(np.float32)


def write_decathlon(
    root: Path, cases: int = 4, validation: bool = False, with_test: bool = False, affine: np.ndarray | None = None,
    first_seed: int = 0, scanner=None,
) -> Path:
    """A tiny Task folder: dataset.json, imagesTr, labelsTr (and imagesTs); `scanner` maps each
    image (and its seed) to how another scanner would have recorded it."""
    training = []
    for i in range(cases):
        image, label = sphere_case(seed=first_seed + i, radius=4 + i % 2)
        if scanner is not None:
            image = scanner(image, first_seed + i)
        write_nifti(root / "imagesTr" / f"case_{i:03d}.nii.gz", image, affine)
        write_nifti(root / "labelsTr" / f"case_{i:03d}.nii.gz", label, affine)
        training.append({"image": f"./imagesTr/case_{i:03d}.nii.gz", "label": f"./labelsTr/case_{i:03d}.nii.gz"})
    spec = {
        "name": "Tiny", "modality": {"0": "MRI"}, "labels": {"0": "background", "1": "core", "2": "shell"},
        "numTraining": cases, "training": training, "test": [],
    }
    if validation:
        spec["validation"], spec["training"] = training[:1], training[1:]
    if with_test:
        image, _ = sphere_case(seed=99)
        write_nifti(root / "imagesTs" / "case_900.nii.gz", image, affine)
        spec["test"] = ["./imagesTs/case_900.nii.gz"]
    (root / "dataset.json").write_text(json.dumps(spec, indent=2))
    return root


def write_nnunet(root: Path, cases: int = 3) -> Path:
    """A tiny nnU-Net v2 raw dataset: imagesTr/{case}_0000.nii.gz, labelsTr/{case}.nii.gz."""
    for i in range(cases):
        image, label = sphere_case(seed=10 + i)
        write_nifti(root / "imagesTr" / f"tiny_{i:03d}_0000.nii.gz", image)
        write_nifti(root / "labelsTr" / f"tiny_{i:03d}.nii.gz", label)
    spec = {"channel_names": {"0": "T2"}, "labels": {"background": 0, "core": 1, "shell": 2},
            "numTraining": cases, "file_ending": ".nii.gz"}
    (root / "dataset.json").write_text(json.dumps(spec, indent=2))
    return root
