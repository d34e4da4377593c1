"""What a command's output must not hold: a reader's failure for a file another reader reads, an
advert, Lightning's line printed by its own handler besides the command's (the same event twice
in a row), a stop said twice, a warning from inside a library."""

from __future__ import annotations

import re

# The prefix of Hydra's log format ([time][logger][LEVEL] - ) and of Lightning's own handler's (INFO: )
PREFIX = re.compile(r"^(\[[^\]]*\]\[[^\]]*\]\[[A-Z]+\] - |[A-Z]+: )")
NOISE = ("unable to load", "💡", "Received SIGTERM", "FutureWarning", "DeprecationWarning")


def noise(output: str) -> list[str]:
    """The lines of `output` a user should not have to read, each with why."""
    lines = output.splitlines()
    found = [f"noise: {line}" for line in lines if any(word in line for word in NOISE)]
    messages = [PREFIX.sub("", line) for line in lines]
    pairs = zip(messages, messages[1:], strict=False)
    found += [f"twice in a row: {line}" for line, after in pairs if line.strip() and line == after]
    return found
