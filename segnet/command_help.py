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

from segnet.config import CONF
from segnet.config_comments import comment_of, parents_in_group
from segnet.config_keys import configuration_keys, group_options

# A key=value in a description or an example (not a flag's --key, not inside a path), and a
# group=option.
SET_KEY = re.compile(r"(?<![\w./-])([a-z_]+(?:\.[a-z_]+)*)=")
GROUP_CHOICE = re.compile(r"(?<![\w./-])([a-z_]+)=(\w+)")
WIDTH = 100
KEY_COLUMN = 30  # where meanings start; a longer key=default pushes its own meaning right
NOT_SET_HERE = ("task_name", "paths")  # the run folder's name and place, which hydra.run.dir sets


def shown_value(node) -> str:
    """A key's default as the yaml says it, interpolations unresolved."""
    if isinstance(node, (DictConfig, ListConfig)) and not node._is_interpolation():
        return "null" if node._is_none() else str(OmegaConf.to_container(node, resolve=False))
    value = node._value()
    if isinstance(value, bool) or value is None:
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)


def main_keys(cfg: DictConfig, texts: list[str]) -> dict[str, str | None]:
    """The command's own keys, then every key that its description and examples set, each with the
    group option that has it where the command's default option does not (data.root: data=folder),
    else None."""
    keys = configuration_keys(cfg)
    own = [str(k) for k in cfg.keys() if str(k) not in (*NOT_SET_HERE, "hydra") and str(k) not in keys.groups]
    own = [k for k in own if k not in keys.sections] + [k for s in own if s in keys.sections
                                                        for k in sorted(keys.keys) if k.startswith(s + ".")]
    found: dict[str, str | None] = dict.fromkeys(own)
    for text in texts:
        chosen = {group: f"{group}={option}" for group, option in GROUP_CHOICE.findall(text) if group in keys.groups}
        for key in SET_KEY.findall(text):
            if key in keys.keys and key not in keys.sections:
                found.setdefault(key, None)
            elif "." in key and key.partition(".")[0] in chosen:
                found.setdefault(key, chosen[key.partition(".")[0]])
    return found


def default_of(key: str, option: str) -> str:
    """The default of `key` (group.inner) that the group option (group=name) sets."""
    group, _, name = option.partition("=")
    files = [CONF / group / f"{name}.yaml"]
    while files:
        path = files.pop(0)
        try:
            return shown_value(node_at(OmegaConf.load(path), key.partition(".")[2]))
        except KeyError:  # not set there: in the option it builds on
            files += parents_in_group(path)
    return ""


def key_table(config_name: str, cfg: DictConfig, texts: list[str]) -> list[str]:
    choices = cfg.hydra.runtime.choices
    keys = main_keys(cfg, texts)
    settings = [f"{key}={shown_value(node_at(cfg, key)) if option is None else default_of(key, option)}"
                for key, option in keys.items()]
    width = min(max(len(s) for s in settings), KEY_COLUMN)
    lines = []
    for (key, option), setting in zip(keys.items(), settings, strict=True):
        meaning = comment_of(key, config_name, choices if option is None else {key.partition(".")[0]:
                                                                                option.partition("=")[2]})
        text = f"{setting:<{width}}  {f'({option}) ' if option else ''}{meaning}".rstrip()
        lines += textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent=" " * (width + 4))
    return lines


def node_at(cfg: DictConfig, key: str):
    """The node of a dotted key, unresolved; a KeyError where there is none."""
    node = cfg
    for part in key.split("."):
        node = node._get_node(part) if isinstance(node, DictConfig) else None
        if node is None:
            raise KeyError(key)
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
