"""Fixtures and hooks of the whole test suite (every folder under tests/); helpers live in the
helpers package (tests/helpers/)."""

from __future__ import annotations

import os

import pytest
import torch

from ops.functional import load_compiled


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
