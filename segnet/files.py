"""Files written whole or not at all: what something later reads (plans, splits, metrics, reports,
label maps, exports, the preprocessed cache, plots) is written under a temporary name beside its
target and renamed over it, so a crash, a kill or a reader at the wrong moment sees the previous
file or the new one, never half of one. (Checkpoints do the same, flushed to disk too:
segnet.checkpoints.writing.)"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The writer of a temporary file, in its name: host, process and thread. They keep concurrent
# writers of one target apart, and tell remove_temporaries which files a live writer still holds.
# The host is its name and its process-id namespace: containers that share a host name do not
# share process ids.


def _host() -> str:
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return re.sub(r"[.~]", "_", f"{socket.gethostname()}-{namespace}")


HOST = _host()
TEMPORARY = re.compile(r"^\..*\.(?P<host>[^.~]+)~(?P<pid>\d+)~\d+\.tmp")


def temporary_beside(path: Path) -> Path:
    """A hidden name beside `path` for this writer, the full ending kept (.nii.gz, .png, .pt2):
    writers choose the format by it."""
    stem, dot, ending = path.name.partition(".")
    return path.with_name(f".{stem}.{HOST}~{os.getpid()}~{threading.get_ident()}.tmp{dot}{ending}")


def writer_may_be_alive(temporary: Path) -> bool:
    """Whether the process that wrote a temporary file may still be writing it: a live process of
    this host, or any of another host (which nothing here can see); not one that died, nor a file
    of another naming."""
    match = TEMPORARY.match(temporary.name)
    if match is None:
        return False
    if match["host"] != HOST:
        return True
    try:
        os.kill(int(match["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write `path`'s content to; renamed over `path` when the block ends
    without an error, removed when it does not."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_beside(path)
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def remove_temporaries(folder: str | Path) -> list[Path]:
    """Deletes what killed writers left in `folder` (their temporary files; the targets they were
    writing were never touched), and nothing a live writer holds: processes predicting parts of
    one folder (num_parts) keep each other's."""
    left = [path for path in sorted(Path(folder).glob(".*.tmp*")) if not writer_may_be_alive(path)]
    for path in left:
        path.unlink(missing_ok=True)
    return left


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as temporary:
        temporary.write_text(text)


def write_json(path: str | Path, value: Any) -> None:
    write_text(path, json.dumps(value, indent=2) + "\n")


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """An exclusive lock held by this process until the block ends (released if it dies)."""
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
