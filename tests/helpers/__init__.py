"""Helpers of the test suite, imported as `helpers.op`, `helpers.training`, ... (pyproject.toml's
[tool.pytest.ini_options] pythonpath puts tests/ on sys.path)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/helpers/__init__.py -> .


def script_module(name: str):
    """scripts/<name>.py imported as Python runs it: with scripts/ first on the path, so that its
    own `from peer_nnunet import ...` finds its neighbour."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
