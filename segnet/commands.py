"""How every segnet command is made: a Hydra main over one of conf/'s top-level configs that
registers the resolvers first and turns the errors a user can fix into one line. The installed
commands (segnet-train, segnet-plan, ... in pyproject.toml) and train.py are built here.

A command names its work as "module:function", imported only once Hydra has composed the
configuration: `--help`, `--cfg job` and a bad override answer without loading torch, Lightning
or MONAI (seconds of imports that a user waiting for a one-line answer should not pay)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hydra
from omegaconf import DictConfig

from segnet.config import CONF, register_resolvers
from segnet.errors import user_errors_as_one_line


@dataclass(frozen=True)
class Command:
    """An installed command: Hydra's main over conf/<config_name>.yaml, after `rewrite` has mapped
    each command-line argument to what Hydra should see."""

    config_name: str
    run: Callable[[], Any]
    rewrite: Callable[[str], str] = str

    def overrides(self, arguments: list[str]) -> list[str]:
        return [self.rewrite(argument) for argument in arguments]

    def __call__(self) -> Any:
        register_resolvers()
        sys.argv = [sys.argv[0], *self.overrides(sys.argv[1:])]
        return self.run()


def imported(work: str) -> Callable[[DictConfig], Any]:
    """The function that "package.module:function" names."""
    module, _, name = work.partition(":")
    return getattr(importlib.import_module(module), name)


def hydra_command(config_name: str, work: str, rewrite: Callable[[str], str] = str) -> Command:
    """The command that runs `work` ("module:function") on the composed `config_name`, with
    errors a user can fix in one line."""

    @hydra.main(version_base="1.3", config_path=str(CONF), config_name=config_name)
    def run(cfg: DictConfig) -> Any:
        with user_errors_as_one_line():
            return imported(work)(cfg)

    return Command(config_name, run, rewrite)
