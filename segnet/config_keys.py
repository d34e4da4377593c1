"""A command's key=value arguments checked against the configuration they would change, before
Hydra makes a run folder and before any work is imported.

Hydra answers a misspelt key with an error that advises `+key=...`, and `+key=...` adds a key
that nothing reads: the run trains with the defaults. Here every key, with or without `+` or
`++`, must be one the composed configuration has, and an unknown one is refused in one line that
names the nearest keys, or the group option that has it (data.root is data=folder's).

`+` still adds where adding is how the configuration is meant to grow: a new entry of a section of
named instances (callbacks, logger) given its _target_ (+callbacks.NAME._target_=...), and any
argument of a section that another library's class takes (trainer, a Lightning callback): Lightning
takes arguments conf/ does not list, but a name one letter from a listed one is refused as a typo.
Hydra's own keys (hydra.*, hydra/...=) are Hydra's to check."""

from __future__ import annotations

import difflib
from argparse import ArgumentError
from dataclasses import dataclass
from functools import cache

from hydra import compose, initialize_config_dir
from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override
from hydra.errors import HydraException
from omegaconf import DictConfig

from segnet.config import CONF
from segnet.errors import ConfigError

# Other tools' names for a setting (MONAI's and Lightning's examples, nnU-Net's trainers), as the
# name of segnet's key for it: difflib finds no likeness between learning_rate and lr.
OTHER_NAMES = {"learning_rate": "lr", "epochs": "max_epochs", "num_epochs": "max_epochs", "n_epochs": "max_epochs",
               "gpus": "devices", "batchsize": "batch_size", "folds": "fold"}
# How alike an added argument of another library's class may be to a listed one before it is taken
# for a typo of it (max_epoch and max_epochs: 0.95; min_epochs, a Trainer argument, and max_epochs: 0.8).
TYPO_LIKENESS = 0.85


@dataclass(frozen=True)
class Keys:
    """A composed configuration's dotted keys, and which of them hold a section."""

    keys: frozenset[str]
    sections: dict[str, DictConfig]
    groups: frozenset[str]  # the command's config groups (conf/ has some that only training uses)

    def known(self, key: str) -> bool:
        """The key itself, or a place inside a value that is no section (a list's entry)."""
        parts = key.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if prefix not in self.keys:
                return False
            if prefix not in self.sections:
                return True
        return True


def configuration_keys(cfg: DictConfig) -> Keys:
    """Every dotted key of `cfg` (composed with its hydra node), read without resolving a value (the
    dataset's may not exist yet), and its groups."""
    keys, sections = set(), {}

    def walk(node: DictConfig, prefix: str) -> None:
        for name in node.keys():
            if not prefix and name == "hydra":  # Hydra's own: Hydra checks them
                continue
            child = node._get_node(name)
            key = f"{prefix}{name}"
            keys.add(key)
            if isinstance(child, DictConfig) and not (child._is_none() or child._is_missing()
                                                      or child._is_interpolation()):
                sections[key] = child
                walk(child, key + ".")

    groups = frozenset(str(g) for g in cfg.hydra.runtime.choices if not str(g).startswith("hydra"))
    walk(cfg, "")
    return Keys(frozenset(keys), sections, groups)


def group_options(group: str) -> list[str]:
    return sorted(path.stem for path in (CONF / group).glob("*.yaml"))


def is_group(key: str) -> bool:
    return bool(key) and (CONF / key).is_dir()


@cache  # a command composes once; the documentation's checks and a sweep's options compose alike many times
def composed_keys(config_name: str, *groups: str) -> Keys:
    """The keys of conf/<config_name>.yaml composed with these group overrides."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return configuration_keys(compose(config_name=config_name, overrides=list(groups), return_hydra_config=True))


def choices(override: Override) -> list[str]:
    """The options a group override names: one, a list of them (logger=[tensorboard,csv]), or each
    of a sweep's."""
    if not override.is_sweep_override():
        value = override.value()
        return [str(v) for v in value] if isinstance(value, list) else [str(value)]
    if isinstance(override._value, Glob):
        return override._value.filter(group_options(override.key_or_group))
    return list(override.sweep_string_iterator())


def keys_of_every_choice(config_name: str, group_overrides: list[Override]) -> Keys:
    """The keys of the configuration the group overrides compose; with a sweep over a group's options,
    the keys of any of them (each job gets one)."""
    fixed = [o.input_line for o in group_overrides if not o.is_sweep_override()]
    swept = [o for o in group_overrides if o.is_sweep_override()]
    found = [composed_keys(config_name, *fixed)]
    for override in swept:
        found += [composed_keys(config_name, *fixed, f"{override.get_key_element()}={option}")
                  for option in choices(override)]
    return Keys(frozenset().union(*(k.keys for k in found)),
                {name: section for k in found for name, section in k.sections.items()},
                frozenset().union(*(k.groups for k in found)))


def is_added(override: Override) -> bool:
    return override.is_add() or override.is_force_add()


def entry_of_named_instances(key: str, keys: Keys) -> str | None:
    """The entry `key` is in, where its top section holds named instances (callbacks.NAME, logger.NAME)."""
    top, _, rest = key.partition(".")
    section = keys.sections.get(top)
    if section is None or not rest or not all(isinstance(section._get_node(e), DictConfig) for e in section.keys()):
        return None
    return f"{top}.{rest.partition('.')[0]}"


def foreign_class(key: str, keys: Keys) -> str | None:
    """The class of another library that `key`'s section is the arguments of (trainer's Lightning
    Trainer), where `key` is no near-miss of a listed argument."""
    parent, _, name = key.rpartition(".")
    section = keys.sections.get(parent)
    if section is None or "_target_" not in section:
        return None
    target = str(section._get_node("_target_")._value())
    listed = [str(entry) for entry in section.keys()]
    typo = difflib.get_close_matches(name, listed, n=1, cutoff=TYPO_LIKENESS) or OTHER_NAMES.get(name) in listed
    return None if target.startswith("segnet.") or typo else target


def added_where_adding_is_meant(override: Override, keys: Keys, overrides: list[Override]) -> bool:
    """`+` (or `++`) where the configuration grows by adding: see the module's docstring."""
    if not is_added(override):
        return False
    entry = entry_of_named_instances(override.key_or_group, keys)
    if entry is not None:
        return any(o.key_or_group == f"{entry}._target_" and is_added(o) for o in overrides)
    return foreign_class(override.key_or_group, keys) is not None


def nearest_keys(key: str, keys: Keys) -> list[str]:
    """The closest few of the configuration's settings and group names (as `group=`) to `key`."""
    settings = sorted(keys.keys - set(keys.sections))
    candidates = settings + [f"{group}=" for group in sorted(keys.groups)]
    parent, _, name = key.rpartition(".")
    renamed = OTHER_NAMES.get(name)
    first = [k for k in settings if renamed and k == f"{parent}.{renamed}".lstrip(".")]
    # A key's own section first: optim.learning_rate is more likely optim.lr than data.spacing.
    siblings = [k for k in candidates if parent and k.startswith(parent + ".")]
    close = difflib.get_close_matches(key, siblings, n=3, cutoff=0.5) + difflib.get_close_matches(key, candidates, n=3)
    if not close:  # a leaf name in another section: batchsize is data.batch_size
        by_name: dict[str, list[str]] = {}
        for k in settings:
            by_name.setdefault(k.rpartition(".")[2], []).append(k)
        close = [k for n in difflib.get_close_matches(name, list(by_name), n=3) for k in by_name[n]]
    return list(dict.fromkeys(first + close))[:3]


def group_with_key(config_name: str, key: str, group_overrides: list[Override]) -> list[str]:
    """The options of the key's group (data=folder for data.root) whose configuration has the key,
    where the chosen one does not."""
    group = key.partition(".")[0]
    if not is_group(group):
        return []
    others = [o.input_line for o in group_overrides if o.key_or_group != group]
    having = []
    for option in group_options(group):
        try:
            if composed_keys(config_name, *others, f"{group}={option}").known(key):
                having.append(f"{group}={option}")
        except HydraException:  # an option that needs another group's choice, e.g. a recipe
            continue
    return having


def refusal(command: str, override: Override, config_name: str, keys: Keys, group_overrides: list[Override]) -> str:
    """The one line that says what is wrong with an override whose key the configuration lacks,
    and what to give instead."""
    key, given = override.key_or_group, override.input_line
    options = group_with_key(config_name, key, group_overrides)
    if options:
        return f"{given}: {key} is a key of {' or '.join(options)}, which this run does not use: add {options[0]}"
    entry = entry_of_named_instances(key, keys)
    if entry is not None and entry not in keys.keys and is_added(override):
        return f"{given}: {entry} is a new entry of {entry.partition('.')[0]}; give its class too: " \
               f"+{entry}._target_=CLASS"
    target = foreign_class(key, keys)
    if target is not None:
        return f"{given}: {key.rpartition('.')[0]} lists no {key.rpartition('.')[2]}; to pass it to {target}, " \
               f"add it: +{key}={override.get_value_element_as_str()}"
    added = "; `+` adds a key that nothing in segnet reads, it does not set one" if is_added(override) else ""
    nearest = nearest_keys(key, keys)
    hint = f"did you mean {' or '.join(nearest)}?" if nearest else "no key is close to it"
    return f"{given}: {command} has no key {key}{added}; {hint} ({command} --help lists its main keys)"


def unknown_option(override: Override) -> str | None:
    """The one line for a group option conf/ does not hold (Hydra's own answer is a dozen lines)."""
    options = group_options(override.key_or_group)
    missing = [o for o in choices(override) if o not in options and o != "None"]
    if not missing:
        return None
    nearest = difflib.get_close_matches(missing[0], options, n=2)
    hint = f"did you mean {' or '.join(f'{override.key_or_group}={o}' for o in nearest)}? " if nearest else ""
    return f"{override.input_line}: {override.key_or_group} has no option {missing[0]}; {hint}" \
           f"the options: {', '.join(options)}"


def check_keys(command: str, config_name: str, arguments: list[str]) -> None:
    """A ConfigError for the first argument whose key the composed configuration lacks, or whose
    group option conf/ does not hold (see the module's docstring); arguments Hydra cannot parse are
    left to its own message."""
    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        flags = parser.parse_args(arguments)
        overrides = OverridesParser.create().parse_overrides(flags.overrides)
    except (ArgumentError, SystemExit, HydraException):  # Hydra says what is malformed
        return
    if flags.shell_completion or flags.info:
        return
    mine = [o for o in overrides if not o.is_hydra_override() and o.key_or_group != "hydra" and o.package is None]
    group_overrides = [o for o in mine if is_group(o.key_or_group) and not o.is_delete()]
    for override in group_overrides:
        problem = unknown_option(override)
        if problem:
            raise ConfigError(problem)
    try:
        keys = keys_of_every_choice(config_name, group_overrides)
    except (HydraException, ValueError):  # a missing plugin, an option Hydra cannot place: Hydra names it
        return
    for override in mine:
        if override.is_add() and not is_group(override.key_or_group) and override.key_or_group in keys.keys:
            raise ConfigError(f"{override.input_line}: {override.key_or_group} is a key already; set it without +: "
                              f"{override.input_line[1:]}")
        if is_group(override.key_or_group) or keys.known(override.key_or_group):
            continue
        if not added_where_adding_is_meant(override, keys, mine):
            raise ConfigError(refusal(command, override, config_name, keys, group_overrides))
