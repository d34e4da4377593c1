"""Fixtures and hooks of the whole test suite (every folder under tests/); helpers live in the
helpers package (tests/helpers/)."""

from __future__ import annotations

import os
from pathlib import Path

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


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a visible CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
