"""How every segnet command is made: a Hydra main over one of conf/'s top-level configs that
registers the resolvers first and turns the errors a user can fix into one line. The installed
commands (segnet-train, segnet-plan, ... in pyproject.toml) and train.py are built here."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import hydra
from omegaconf import DictConfig

from segnet.config import CONF, register_resolvers
from segnet.errors import user_errors_as_one_line


def hydra_command(config_name: str, work: Callable[[DictConfig], Any],
                  rewrite: Callable[[str], str] | None = None) -> Callable[[], Any]:
    """The entry point that runs `work` on the composed `config_name`; `rewrite` maps each
    command-line argument to what Hydra should see."""

    @hydra.main(version_base="1.3", config_path=str(CONF), config_name=config_name)
    def run(cfg: DictConfig) -> Any:
        with user_errors_as_one_line():
            return work(cfg)

    def main() -> Any:
        register_resolvers()
        if rewrite is not None:
            sys.argv = [sys.argv[0], *map(rewrite, sys.argv[1:])]
        return run()

    return main
