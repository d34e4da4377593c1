"""scripts/mutation_check.py: its mutants still apply to the code, and a mutant is run in a copy
of the checkout and killed there (the full check runs every mutant: see its docstring)."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT

SCRIPT = ROOT / "scripts" / "mutation_check.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_every_mutant_still_applies_to_the_code():
    listed = run("--list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "op-reference-sobel-tap:" in listed.stdout
    assert "NOT APPLIED" not in listed.stdout, listed.stdout  # update scripts/mutants.yaml with the code they mutate


def test_a_mutant_is_run_in_a_copy_and_killed():
    done = run("--only", "op-reference-sobel-tap")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "op-reference-sobel-tap: killed test_" in done.stdout
    assert "1 of 1 killed" in done.stdout
    assert "DERIV = (-1.0, 0.0, 1.0)" in (ROOT / "ops" / "reference.py").read_text()  # the checkout untouched
