"""Helpers of the test suite, imported as `helpers.op`, `helpers.training`, ... (pyproject.toml's
[tool.pytest.ini_options] pythonpath puts tests/ on sys.path)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/helpers/__init__.py -> .
