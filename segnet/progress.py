"""What a step that can take more than a few seconds says while it runs, the same in every command:
a line when it starts, with its total ("3 case(s)", "step 2/3"), a line with its time when it
ends, and a bar over its items with that total.

The lines go through logging, so they reach the console and a command's log file alike. The bar
is tqdm's on stderr, drawn only where stderr is a terminal: a log file or a pipe gets the lines
and no carriage-return redraws."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterable, Iterator, Sized
from pathlib import Path
from typing import TypeVar

from tqdm import tqdm

log = logging.getLogger("segnet")
Item = TypeVar("Item")


def say(message: str, *args: object) -> None:
    """One line of what a command is doing (logging's %-style arguments)."""
    log.info(message, *args)


def on_terminal() -> bool:
    """Whether the bars are drawn: stderr, where tqdm writes them, is a terminal."""
    return sys.stderr.isatty()


def bar(items: Iterable[Item], what: str, unit: str, total: int | None = None) -> Iterator[Item]:
    """`items`, with a bar of `what` counting `unit`s out of their total (len(items) unless given)."""
    count = total if total is not None else len(items) if isinstance(items, Sized) else None
    return iter(tqdm(items, total=count, desc=what, unit=unit, disable=not on_terminal()))


@contextlib.contextmanager
def step(what: str, number: int | None = None, of: int | None = None) -> Iterator[None]:
    """`what` said before it starts ("what (number/of) ..." when it is one of several steps) and
    its time said when it ends."""
    place = f" ({number}/{of})" if number is not None else ""
    say("%s%s ...", what, place)
    start = time.perf_counter()
    yield
    say("%s%s: done in %.1f s", what, place, time.perf_counter() - start)


def starting(command: str = "") -> None:
    """The first line of a command, said before it imports torch, MONAI and Lightning (seconds,
    a minute on a cold disk) so that its start is never silent."""
    name = command or Path(sys.argv[0]).name
    say("%s: loading torch and its libraries (a few seconds; longer on a cold disk) ...", name)
