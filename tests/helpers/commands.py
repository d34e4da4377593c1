"""Running segnet's installed commands (segnet-plan, segnet-predict, ...) as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def installed_command(name: str) -> str:
    """The console script pyproject.toml installs as `name`, beside this interpreter."""
    return str(Path(sys.executable).parent / name)


def run_command(name: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`name ARGS` (an installed command), its output captured as text."""
    return subprocess.run([installed_command(name), *args], capture_output=True, text=True, timeout=timeout)
