"""Stopping tiny trainings as users and job systems stop them: a signal at a chosen point of a fit
in this process, the step a run in another process has reached, and the processes a signal to
its process group reaches."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn


class SignalAt(L.Callback):
    """Sends `name` (SIGTERM, SIGINT) to this process at optimizer step `step` of the fit: after
    that step (`where="training"`), or after the first batch of the validation that follows it
    (`where="validation"`), a stop in the middle of a validation. A run takes it with the
    overrides in signal_at(name, step, where)."""

    def __init__(self, name: str, step: int, where: str):
        self.signal, self.step, self.where = signal.Signals[name], step, where

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.where == "training" and trainer.global_step == self.step:
            signal.raise_signal(self.signal)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        fit = trainer.state.fn == TrainerFn.FITTING
        if self.where == "validation" and fit and trainer.global_step == self.step and batch_idx == 0:
            signal.raise_signal(self.signal)


def signal_at(name: str, step: int, where: str) -> list[str]:
    return ["+callbacks.signal._target_=helpers.stops.SignalAt", f"+callbacks.signal.name={name}",
            f"+callbacks.signal.step={step}", f"+callbacks.signal.where={where}"]


class StepFile(L.Callback):
    """Writes the global step to `path` after every optimizer step, for a test that waits on a
    run in another process (whose PYTHONPATH holds tests/). Overrides: step_file(path)."""

    def __init__(self, path: str):
        self.path = Path(path)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.path.write_text(str(trainer.global_step))


def step_file(path: Path) -> list[str]:
    return ["+callbacks.step_file._target_=helpers.stops.StepFile", f"+callbacks.step_file.path={path}"]


def wait_for_step(path: Path, step: int, process: subprocess.Popen, timeout: float = 300) -> int:
    """Until the run writing `path` (StepFile) has trained `step` steps: the steps it has trained
    then. Fails if the run ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        trained = int(path.read_text() or 0) if path.is_file() else 0
        if trained >= step:
            return trained
        time.sleep(0.05)
    raise AssertionError(f"the run ended (status {process.poll()}) or timed out before step {step}")


def process_group(pgid: int, within: float = 0) -> list[int]:
    """The running processes of process group `pgid` (Linux's /proc), after up to `within`
    seconds for it to empty."""
    deadline = time.monotonic() + within
    while True:
        members = [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and running_in(int(entry), pgid)]
        if not members or time.monotonic() >= deadline:
            return members
        time.sleep(0.1)


def running_in(pid: int, pgid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        return os.getpgid(pid) == pgid and state != "Z"  # an ended child its parent has not reaped yet
    except (ProcessLookupError, FileNotFoundError):  # ended meanwhile
        return False
