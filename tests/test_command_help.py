"""Each command's --help says what it does, lists its main keys with their meanings (the comments
in conf/) and only the groups it composes, and shows its examples; --cfg job and --hydra-help stay
Hydra's."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from functools import cache

import pytest

from segnet.commands import COMMANDS

# Groups of conf/ that only training composes.
TRAINING_ONLY = ("model", "optim", "loss", "trainer", "callbacks", "logger", "variant", "recipe", "budget",
                 "experiment", "profiler")


@cache
def printed(config_name: str, *arguments: str) -> str:
    """What the command of conf/<config_name>.yaml prints given ARGUMENTS, run in this process; it
    must exit as a success."""
    command = COMMANDS[config_name]
    out, argv = io.StringIO(), sys.argv
    sys.argv = [command.name, *arguments]
    try:
        with contextlib.redirect_stdout(out):
            command()
    except SystemExit as exited:  # Hydra ends --help with one
        assert exited.code in (0, None), exited.code
    finally:
        sys.argv = argv
    return out.getvalue()


def key_lines(text: str) -> dict[str, str]:
    """The help's key table: each key and the rest of its entry (default and meaning)."""
    table = text.partition("Main keys")[2].partition("\n\n")[0]
    entries = re.split(r"\n  (?=\S)", table.partition("\n  ")[2])
    return {entry.partition("=")[0]: " ".join(entry.partition("=")[2].split()) for entry in entries}


@pytest.mark.parametrize("config_name", sorted(COMMANDS))
def test_the_help_says_what_the_command_does_its_main_keys_and_examples(config_name):
    command = COMMANDS[config_name]
    text = printed(config_name, "--help")
    assert " ".join(command.description.split())[:60] in " ".join(text.split())
    assert all(f"  {example}" in text for example in command.examples) and len(command.examples) == 2
    keys = key_lines(text)
    set_in_examples = {k for example in command.examples for k in re.findall(r" ([a-z_.]+)=", example)}
    assert {k for k in set_in_examples if "." in k or k not in ("data", "model")} <= set(keys)
    without_meaning = [key for key, entry in keys.items() if len(entry.split()) < 3]
    assert not without_meaning, f"give these keys a comment in conf/: {without_meaning}"


def test_a_key_shows_its_default_and_the_meaning_from_its_comment():
    keys = key_lines(printed("evaluate", "--help"))
    assert keys["data.split"] == "validation evaluation split: validation, test or all"  # conf/data/folder.yaml's
    assert keys["tta"].startswith("true mirror as nnU-Net validates")  # conf/evaluate.yaml's


def test_predict_lists_no_training_group_and_says_model():
    text = printed("predict", "--help")
    groups = re.findall(r"^  (\w+)=", text.partition("Groups")[2], re.MULTILINE)
    assert groups == ["op"]
    assert not any(re.search(rf"^  {group}[=.]", text, re.MULTILINE) for group in TRAINING_ONLY)
    assert "model=PATH" in text and "exported=" in text


def test_plan_says_verify():
    assert "--verify" in printed("plan", "--help") and "verify=false" in printed("plan", "--help")


def test_the_groups_list_the_options_and_the_default():
    text = printed("train", "--help")
    assert "  data=folder, synthetic2d*, synthetic2d_hard, synthetic3d\n" in text
    assert "  profiler=pytorch  (none by default)\n" in text


def test_a_key_of_an_option_the_examples_choose_says_which():
    assert key_lines(printed("train", "--help"))["data.root"].startswith("??? (data=folder) the dataset folder")
    assert key_lines(printed("train", "data=folder", "--help"))["data.root"].startswith("??? the dataset folder")


def test_cfg_job_and_hydra_help_stay_hydras():
    assert "ckpt_path: null" in printed("predict", "--cfg", "job")
    assert "== Flags ==" in printed("predict", "--hydra-help")
