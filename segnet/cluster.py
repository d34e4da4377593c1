"""One process per job prepares what every process reads (the plan, the integrity check, the run
folder's files), whatever started the processes: Lightning's own launcher, torchrun, SLURM's srun
or hydra/launcher=slurm. The others wait for its file and read it whole; when it fails, they stop
with its message instead of waiting for a rank that is gone."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from lightning.fabric.utilities.rank_zero import rank_zero_only

from segnet.errors import ConfigError
from segnet.files import write_text

POLL_S = 0.5
WAIT_S = 6 * 3600  # planning a thousand CT cases takes a while; a dead first process is seen sooner
STALE_S = 60  # a failure older than this before a waiting process started is an earlier attempt's


def is_first_process() -> bool:
    """Global rank 0, as Lightning reads it from the launcher (RANK, LOCAL_RANK, SLURM_PROCID,
    JSM_NAMESPACE_RANK; none: a process on its own), on the first node."""
    return (rank_zero_only.rank or 0) == 0 and int(os.environ.get("NODE_RANK", "0")) == 0


def failure_path(result: Path) -> Path:
    return result.with_name(result.name + ".failed")


@contextlib.contextmanager
def reporting_failure(result: Path) -> Iterator[None]:
    """Around the first process's work towards `result`: an error is written beside it, for the
    processes waiting on it, then raised as usual."""
    failure_path(result).unlink(missing_ok=True)
    try:
        yield
    except Exception as error:
        write_text(failure_path(result), f"{type(error).__name__}: {error}")
        raise


def wait_for(result: Path, timeout_s: float = WAIT_S) -> None:
    """Until the first process has written `result`; its failure raised here as a ConfigError."""
    started = time.time()
    failure = failure_path(result)
    while not result.is_file():
        if failure.is_file() and failure.stat().st_mtime > started - STALE_S:
            raise ConfigError(f"the first process (rank 0) failed to write {result.name}: {failure.read_text()}")
        if time.time() - started > timeout_s:
            raise ConfigError(f"waited {timeout_s:.0f} s for rank 0 to write {result}; it may have been killed "
                              "(its log says why). With srun, give every task the same hydra.run.dir.")
        time.sleep(POLL_S)
