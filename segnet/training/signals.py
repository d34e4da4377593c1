"""How a training stops when asked: SIGTERM (a preemption, `scancel`, `timeout`) or SIGINT
(Ctrl-C), sent to the main process alone or, as terminals and job systems send them, to its
whole process group, DataLoader workers included.

The main process decides: workers ignore both signals (the main process shuts them down as
usual), and SIGINT asks the fit what SIGTERM asks, Lightning's graceful stop after the optimizer
step in progress (its SIGTERMException). At that stop last.ckpt is written and the run says, in
one line, that it stopped and how to resume (Lightning's own "Received SIGTERM", which a Ctrl-C
would print too, is left out). A second Ctrl-C stops at once (Lightning's KeyboardInterrupt),
without a checkpoint.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import lightning as L
from lightning.fabric.utilities.seed import pl_worker_init_function
from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SIGNAL_NAMES = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}
LIGHTNING_SIGNALS = "lightning.pytorch.trainer.connectors.signal_connector"  # the logger of Lightning's handler


class WithoutReceivedSigterm(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Received SIGTERM" not in str(record.msg)


def ignore_stop_signals(worker_id: int) -> None:
    """A DataLoader worker's worker_init_fn: the worker ignores SIGINT and SIGTERM. A signal to
    the process group reaches the workers too; one killed by it fails the main process's next
    fetch (`DataLoader worker ... is killed by signal`), one that quits on it (torch's workers do
    at SIGINT) leaves the step in progress without its next batch. Workers still end when the
    main process shuts its loaders down, or is gone. Then the worker's generators are seeded as
    Lightning's own worker_init_fn (for seed_everything(workers=True)), which this one replaces,
    seeds them."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    pl_worker_init_function(worker_id)


class GracefulStop(L.Callback):
    """During the fit, SIGINT as SIGTERM; at Lightning's stop, last.ckpt at the step it stopped
    after, the one-line hint to resume, and the command's exit status: 0 after SIGTERM, which job
    systems send to a job they restart or requeue; 130 (128 + 2, as shells report Ctrl-C) after
    SIGINT, so that `segnet-train ... && next-step` does not go on."""

    def __init__(self, last_path: str):
        self.last_path = Path(last_path)
        self.received = signal.SIGTERM

    def on_train_start(self, trainer, pl_module) -> None:
        # After Lightning registered its SIGTERM handler; its teardown restores the SIGINT handler.
        # A process started to ignore SIGINT (a shell's background job) keeps ignoring it.
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, self.interrupt)
        lightning = logging.getLogger(LIGHTNING_SIGNALS)
        if not any(isinstance(f, WithoutReceivedSigterm) for f in lightning.filters):
            lightning.addFilter(WithoutReceivedSigterm())  # on_exception says the stop

    def interrupt(self, signum, frame) -> None:
        self.received = signal.SIGINT
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C: at once
        signal.raise_signal(signal.SIGTERM)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException):
            return
        # SIGTERMException is a SystemExit, which Lightning re-raises: its code is the exit status
        exception.code = 128 + signal.SIGINT if self.received == signal.SIGINT else 0
        if trainer.fast_dev_run:  # which writes no checkpoints
            return
        trainer.save_checkpoint(self.last_path, weights_only=False)  # whole: optimizer and schedule too
        if trainer.is_global_zero:
            log.info("Stopped by %s at step %d: %s saved; run the same command to resume", SIGNAL_NAMES[self.received],
                     trainer.global_step, self.last_path)
