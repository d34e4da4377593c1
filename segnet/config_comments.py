"""What a configuration key means, read from the comment beside it in conf/: the comments are the
one place a key is described, and `--help` shows them.

A key's comment is the text after `#` on its line, and the comment lines below it that start at
the same column (conf/ continues a long comment that way)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from omegaconf import DictConfig

from segnet.config import CONF

KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_]\w*):(?P<rest>.*)$")
COMMENT_LINE = re.compile(r"^(?P<indent> *)#")


@cache
def key_comments(path: Path) -> dict[str, str]:
    """Each dotted key of one yaml file that has a comment, and the comment."""
    comments: dict[str, str] = {}
    parents: list[tuple[int, str]] = []  # (indent, key) of the sections the current line is in
    last, column = None, -1
    for line in path.read_text().splitlines():
        continued = COMMENT_LINE.match(line)
        if continued:
            if last is not None and line.index("#") == column:
                comments[last] += " " + line[column + 1:].strip()
            continue
        last, column = None, -1
        found = KEY_LINE.match(line)
        if not found:
            continue
        indent = len(found["indent"])
        while parents and parents[-1][0] >= indent:
            parents.pop()
        key = ".".join([*(name for _, name in parents), found["key"]])
        parents.append((indent, found["key"]))
        value, hash_, comment = found["rest"].partition(" #")
        if hash_ and comment.strip():
            last, column = key, len(line) - len(comment) - 1
            comments[key] = comment.strip()
    return comments


def parents_in_group(path: Path) -> list[Path]:
    """The files of the same group that a group option's defaults list builds on (synthetic3d on
    synthetic2d), nearest first."""
    names = re.findall(r"^ *- (\w+)\s*$", path.read_text(), re.MULTILINE)
    found = [path.parent / f"{name}.yaml" for name in names if name != "_self_"]
    return [p for p in found if p.is_file()]


def comment_of(key: str, config_name: str, choices: DictConfig) -> str:
    """The comment of `key` in the file that sets it for this command: its group option's (and the
    options that one builds on), else the command's own conf/<config_name>.yaml."""
    group, _, inner = key.partition(".")
    choice = choices.get(group) if inner else None
    if choice is not None:
        files = [CONF / group / f"{choice}.yaml"]
        while files:
            path = files.pop(0)
            if inner in key_comments(path):
                return key_comments(path)[inner]
            files += parents_in_group(path)
        return ""
    return key_comments(CONF / f"{config_name}.yaml").get(key, "")
