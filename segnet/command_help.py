"""A command's `--help`: what it does (the command's own description in segnet.commands), its main
keys with their defaults and meanings (the comments beside them in conf/), the groups it composes
and two examples. conf/hydra/default.yaml makes it Hydra's help template (hydra.help.template),
so Hydra's --help flag, with any overrides before it, prints it; --hydra-help stays Hydra's.

The main keys are the command's own (the top-level keys of conf/<config_name>.yaml) and every key
its description and examples set: one place says which keys matter for a command."""

from __future__ import annotations

import re
import textwrap

from omegaconf import DictConfig, ListConfig, OmegaConf

from segnet.config_comments import comment_of
from segnet.config_keys import configuration_keys, group_options

# A key=value in a description or an example (not a flag's --key, not inside a path).
SET_KEY = re.compile(r"(?<![\w./-])([a-z_]+(?:\.[a-z_]+)*)=")
WIDTH = 100
KEY_COLUMN = 30  # where meanings start; a longer key=default pushes its own meaning right
NOT_SET_HERE = ("task_name", "defaults", "paths")  # the run folder's name and place: Hydra's settings


def shown_value(node) -> str:
    """A key's default as the yaml says it, interpolations unresolved."""
    if isinstance(node, (DictConfig, ListConfig)) and not node._is_interpolation():
        return "null" if node._is_none() else str(OmegaConf.to_container(node, resolve=False))
    value = node._value()
    if isinstance(value, bool) or value is None:
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)


def main_keys(config_name: str, cfg: DictConfig, texts: list[str]) -> list[str]:
    """The command's own keys, then every key that its description and examples set, as the
    configuration has them."""
    keys = configuration_keys(cfg)
    own = [str(k) for k in cfg.keys() if str(k) not in (*NOT_SET_HERE, "hydra") and str(k) not in keys.groups]
    own = [k for k in own if k not in keys.sections] + [k for s in own if s in keys.sections
                                                        for k in sorted(keys.keys) if k.startswith(s + ".")]
    mentioned = [k for text in texts for k in SET_KEY.findall(text) if k in keys.keys and k not in keys.sections]
    return list(dict.fromkeys(own + mentioned))


def key_table(config_name: str, cfg: DictConfig, texts: list[str]) -> list[str]:
    choices = cfg.hydra.runtime.choices
    keys = main_keys(config_name, cfg, texts)
    settings = [f"{key}={shown_value(node_at(cfg, key))}" for key in keys]
    width = min(max(len(s) for s in settings), KEY_COLUMN)
    lines = []
    for key, setting in zip(keys, settings, strict=True):
        text = f"{setting:<{width}}  {comment_of(key, config_name, choices)}".rstrip()
        lines += textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent=" " * (width + 4))
    return lines


def node_at(cfg: DictConfig, key: str):
    """The node of a dotted key, unresolved."""
    node = cfg
    for part in key.split("."):
        node = node._get_node(part)
    return node


def group_lines(cfg: DictConfig) -> list[str]:
    """Each group the command composes, its options, the chosen one marked."""
    lines = []
    for group, chosen in sorted(cfg.hydra.runtime.choices.items()):
        if str(group).startswith("hydra") or group in NOT_SET_HERE:
            continue
        options = [f"{o}*" if o == chosen else o for o in group_options(str(group))]
        text = f"{group}=" + ", ".join(options) + ("" if chosen is not None else "  (none by default)")
        lines += textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent=" " * (len(str(group)) + 3))
    return lines


def help_text(name: str, description: str, examples: tuple[str, ...], cfg: DictConfig) -> str:
    """The help of command `name` over its composed configuration `cfg` (with its hydra node)."""
    config_name = cfg.hydra.job.config_name
    texts = [description, *examples]
    about = textwrap.fill(f"{name}: " + " ".join(description.split()), WIDTH)
    groups = group_lines(cfg)
    parts = [
        [about],
        [f"Main keys (key=default  meaning; {name} --cfg job prints every key):", *key_table(config_name, cfg, texts)],
        ["Groups (group=option, * the default):", *groups] if groups else [],
        ["Examples:", *(f"  {example}" for example in examples)],
        [textwrap.fill("A key the configuration lacks is refused with the nearest ones, before anything runs. "
                       "--hydra-help: Hydra's own flags (-m to sweep, hydra.run.dir=... for the run folder).", WIDTH)],
    ]
    # Hydra fills the help template in with string.Template: a $ of the text is $$
    return "\n\n".join("\n".join(part) for part in parts if part).replace("$", "$$")


def help_template(_root_: DictConfig) -> str:
    """The resolver conf/hydra/default.yaml's hydra.help.template calls: the help of the command
    that composed `_root_`."""
    from segnet.commands import COMMANDS  # the commands import this module's caller, segnet.config

    command = COMMANDS[_root_.hydra.job.config_name]
    return help_text(command.name, command.description, command.examples, _root_)
