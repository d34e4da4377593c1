"""Running segnet's installed commands (segnet-plan, segnet-predict, ...) as a user would."""

from __future__ import annotations

import subprocess
from pathlib import Path

from segnet.command_runs import installed_command


def run_command(name: str, *args: str, timeout: int = 600, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`name ARGS` (an installed command) in `cwd` (default: this process's), its output captured as
    text."""
    return subprocess.run([str(installed_command(name)), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)
