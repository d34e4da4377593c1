"""Fixtures and hooks of the whole test suite (every folder under tests/); helpers live in the
helpers package (tests/helpers/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from ops.functional import load_compiled


def pytest_configure(config):
    """Under pytest-xdist, each worker's share of the cores for torch's threads (and OpenMP's, in
    the processes a test starts): workers that each spin a thread per core wait on each other."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


@pytest.fixture(scope="session", autouse=True)
def preprocessed_cache(tmp_path_factory):
    """Every run's preprocessed cache (segnet.preprocessing) in the test run's temporary folder,
    for subprocesses too, not in the user's ~/.cache."""
    folder = tmp_path_factory.mktemp("preprocessed")
    previous = os.environ.get("SEGNET_PREPROCESSED")
    os.environ["SEGNET_PREPROCESSED"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("SEGNET_PREPROCESSED")
    else:
        os.environ["SEGNET_PREPROCESSED"] = previous


@pytest.fixture(scope="session", autouse=True)
def op_cache(tmp_path_factory):
    """One cache of the op's builds for the whole test run, shared by its pytest-xdist workers and
    every subprocess: each library compiles once per run, from nothing, and the tests, the
    commands they start, the kernel report and the wheel all load that build. A SEGNET_OPS_CACHE
    already set (a developer keeping builds between runs) is used as it is."""
    if "SEGNET_OPS_CACHE" in os.environ:
        yield Path(os.environ["SEGNET_OPS_CACHE"])
        return
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "ops-cache"
    os.environ["SEGNET_OPS_CACHE"] = str(folder)
    yield folder
    os.environ.pop("SEGNET_OPS_CACHE")


@pytest.fixture(scope="session")
def cpu_library():
    """The compiled CPU library, built once per test run."""
    load_compiled("cpu")
    return torch.ops.segnet_ops


class TrainedRun(NamedTuple):
    """A shared tiny model: the task it trained on and its run folder, both read-only to tests."""

    root: Path
    run: Path

    @property
    def checkpoint(self) -> Path:
        return self.run / "checkpoints" / "last.ckpt"


def folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder` with its size and modification time."""
    return {str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in sorted(folder.rglob("*")) if path.is_file()}


def shared_unchanged(value, *folders: Path):
    """The body of a fixture shared by the whole test run: yields `value`; afterwards fails if a
    test wrote into, or removed from, one of `folders`. Shared by every test of the run, they must
    hold the same files whichever test ran first (copy a run folder to tmp_path before writing
    there, e.g. its postprocessing.json)."""
    made = [folder_state(folder) for folder in folders]
    yield value
    changed = [str(folder) for folder, state in zip(folders, made, strict=True) if folder_state(folder) != state]
    assert not changed, f"a test changed the shared folder(s) {changed}: copy them to tmp_path before writing there"


@pytest.fixture(scope="session")
def tiny_task(tmp_path_factory) -> Path:
    """The tiny Decathlon task of the shared models below (per pytest-xdist worker: each has its
    own tmp_path_factory)."""
    from helpers.training import write_tiny_task  # with Hydra and Lightning: seconds only a test that asks waits

    root = write_tiny_task(tmp_path_factory.mktemp("tiny_task"))
    yield from shared_unchanged(root, root)


@pytest.fixture(scope="session")
def trained_3d(tiny_task, tmp_path_factory) -> TrainedRun:
    """One tiny 3D model for every inference, export, postprocessing and evaluation test that
    needs a real one, trained once per test run. 60 steps: enough to have learned the spheres
    (validation Dice 0.85, each class one component, on the 2-core machine in 10-20 s), which
    postprocessing's test needs; after 2 steps class 1 is one blob reaching the corners, after 20 23 pieces."""
    from helpers.training import train_tiny_model

    run = tmp_path_factory.mktemp("trained_3d")
    train_tiny_model(tiny_task, run, "data.patch_size=[16,16,16]", "data.batch_size=1", "data.steps_per_epoch=60")
    yield from shared_unchanged(TrainedRun(tiny_task, run), run)


@pytest.fixture(scope="session")
def trained_2d(tiny_task, tmp_path_factory) -> TrainedRun:
    """The 2D model of trained_3d's task and fold (another configuration, slice by slice). Two
    steps: its tests ask what it computes, not how well (250 took a minute)."""
    from helpers.training import train_tiny_model

    run = tmp_path_factory.mktemp("trained_2d")
    train_tiny_model(tiny_task, run, "data.spatial_dims=2", "data.patch_size=[16,16]", "data.batch_size=1",
                     "data.steps_per_epoch=2")
    yield from shared_unchanged(TrainedRun(tiny_task, run), run)


@pytest.fixture(scope="session")
def nnunet_model(tmp_path_factory):
    """A tiny nnU-Net v2 model trained by nnU-Net's own planning, preprocessing and trainer (20
    iterations on the CPU), and nnUNetPredictor's label maps of two more cases: tests/helpers/
    nnunet_model.py, in a process of its own, as nnU-Net reads its folders' places once."""
    pytest.importorskip("nnunetv2")
    from helpers.nnunet_model import NnunetModel

    base = tmp_path_factory.mktemp("nnunet")
    script = Path(__file__).parent / "helpers" / "nnunet_model.py"
    done = subprocess.run([sys.executable, str(script), str(base)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    yield from shared_unchanged(NnunetModel(base), base / "results")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a visible CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
