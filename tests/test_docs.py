"""The README and docs/ say only what is true of the repository: every `segnet-*`, `python
train.py`, `python -m ...`, `python scripts/...` and `make` command they show composes or
parses (Hydra's config for the command, the script's own --help), every repository path they
name exists, every link and its anchor lands on a file and a heading, the configuration table
lists every option, and no text of the repository refers to issues or sessions of its making.

The docs are split by kind: guides in docs/ (each under GUIDE_WORDS), the measured tables in
docs/results/ (each page saying its date, commit and machine), and docs/architecture.md, linked
from the README; every page is linked from another, and every docs path or anchor that code,
configuration, scripts or tests name exists."""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import importlib.util
import io
import re
import runpy
import shlex
import subprocess
import sys
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from segnet.commands import Command
from segnet.config import CONF, register_resolvers
from segnet.config_keys import check_keys

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
GUIDES = sorted((ROOT / "docs").glob("*.md"))
RESULTS = sorted((ROOT / "docs" / "results").glob("*.md"))
README_WORDS = 1500
GUIDE_WORDS = 1500

COMMAND_START = re.compile(r"^\$?\s*(segnet-[a-z]+|python3? train\.py|python3? -m [\w.]+|python3? scripts/\S+|"
                           r"bash scripts/\S+|make [\w-]+)")
# Inside a wheel only: the built libraries, and the folders setup.py copies into the packages.
WHEEL_ONLY = ("ops/_lib", "ops/csrc", "segnet/conf")
REPOSITORY_PATH = re.compile(r"(?<![\w/.<-])((?:ops|csrc|segnet|conf|tests|scripts|docs|\.ci)/[\w./*-]*"
                             r"|train\.py|setup\.py|pyproject\.toml|Makefile)(?:::([\w\[\]-]+))?")
ABOUT_ITS_MAKING = (re.compile(r"\bissues? #?\d+", re.IGNORECASE),
                    re.compile(r"(?<![\w\"'])sessions?\b(?![\"'])", re.IGNORECASE))


def shown_text(doc: Path) -> list[str]:
    """The code a doc shows: each line of its code blocks (continuations joined) and each inline
    code span."""
    shown, block, in_block = [], [], False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            block.append(line.rstrip())
            if not line.rstrip().endswith("\\"):
                shown.append(" ".join(part.rstrip("\\").strip() for part in block))
                block = []
        else:
            shown.extend(re.findall(r"`([^`]+)`", line))
    return shown


def documented_commands() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for text in shown_text(doc):
            if COMMAND_START.match(text):
                found.append((doc.name, text.split(" #")[0].strip().removeprefix("$").strip()))
    return sorted(set(found))


def arguments(command: str) -> list[str]:
    """A shown command's words, with the placeholders a doc writes dropped (ARGS, ..., DIR) and
    an optional or alternative value ([key=a|b]) taken as its first choice."""
    words = shlex.split(re.sub(r"<(\w+)>", r"\1", command.replace("\\|", "|")))
    kept = []
    for word in words:
        if word.startswith("[") and word.endswith("]") and "=" in word:
            word = word[1:-1]
        if "=" in word and not word.startswith("'"):
            key, value = word.split("=", 1)
            if "|" in value and not value.startswith("["):
                word = f"{key}={value.split('|')[0]}"
        if "=" in word or word.startswith("-"):
            kept.append(word)
    return kept


def console_scripts() -> dict[str, str]:
    """segnet's installed commands (pyproject.toml's [project.scripts]): name -> module:function."""
    return {p.name: p.value for p in entry_points(group="console_scripts") if p.name.startswith("segnet-")}


def installed_command(name: str) -> Command:
    (point,) = [p for p in entry_points(group="console_scripts") if p.name == name]
    return point.load()


def compose_command(command: Command, words: list[str]) -> None:
    check_keys(command.name, command.config_name, [command.rewrite(w) for w in words])  # as the command does
    overrides = command.overrides([w for w in words if not command.rewrite(w).startswith("-")])  # Hydra's flags
    if "-m" in words or "--multirun" in words:  # a sweep: each swept key at its first value
        overrides = [o if o.startswith("hydra") else o.split(",")[0] for o in overrides]
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        compose(config_name=command.config_name, overrides=overrides, return_hydra_config=True)


@cache
def script_help(program: str, module: bool = False) -> str:
    """`python SCRIPT --help` (or `python -m MODULE --help`), run in this process as Python runs
    it (the script's folder first on the path): the libraries it imports are loaded once per test
    process, not once per documented script."""
    out = io.StringIO()
    argv, path = sys.argv, sys.path
    sys.argv = [program, "--help"]
    sys.path = path if module else [str(Path(program).parent), *path]
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
            if module:
                runpy.run_module(program, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(program, run_name="__main__")
    finally:
        sys.argv, sys.path = argv, path
    assert exited.value.code in (0, None), f"{program} --help exited with {exited.value.code}"
    return out.getvalue()


def knows(usage: str, flag: str) -> bool:
    """Whether a --help text offers `flag` (a whole option, not the start of a longer one)."""
    return re.search(rf"(?<![\w-]){re.escape(flag.split('=')[0])}(?![\w-])", usage) is not None


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))


def check_command(text: str) -> None:
    first, *rest = shlex.split(text.replace("\\|", "|"))
    if first.startswith("segnet-"):
        assert first in console_scripts(), f"{first} is not a command of pyproject.toml"
        compose_command(installed_command(first), arguments(" ".join(shlex.quote(w) for w in rest)))
    elif first in ("python", "python3") and rest[0] == "train.py":
        compose_command(installed_command("segnet-train"), arguments(" ".join(shlex.quote(w) for w in rest[1:])))
    elif first in ("python", "python3") and rest[0] == "-m":
        module = rest[1]
        if module.startswith("segnet."):
            command = next(n for n, target in console_scripts().items() if target.startswith(module + ":"))
            compose_command(installed_command(command), arguments(" ".join(rest[2:])))
        elif module.startswith("ops."):
            flags = [w for w in rest[2:] if w.startswith("--")]
            usage = script_help(module, module=True)
            assert all(knows(usage, flag) for flag in flags), f"{text}: {flags} not all in its --help"
        else:
            assert module == "build", f"{text}: an unknown module"  # the PyPA build frontend
    elif first in ("python", "python3", "bash"):
        script = ROOT / rest[0]
        assert script.is_file(), f"{text}: {rest[0]} does not exist"
        if script.suffix == ".py":
            usage = script_help(str(script))
            flags = [w.strip("[]") for w in rest[1:] if w.strip("[]").startswith("--")]
            assert all(knows(usage, flag) for flag in flags), f"{text}: {flags} not all in its --help"
    else:
        assert first == "make" and rest[0] in make_targets(), f"{text}: no such make target"


@pytest.mark.parametrize("doc, command", documented_commands(), ids=lambda v: v[:60])
def test_every_documented_command_composes(doc, command):
    check_command(command)


def test_the_checks_catch_a_wrong_command():
    for wrong in ("segnet-train data=nowhere", "segnet-train optim.no_such_key=1", "segnet-plan --verify data.nokey=1",
                  "python scripts/no_such_script.py", "make no-such-target", "python scripts/bench_op.py --no-flag"):
        with pytest.raises(Exception):  # noqa: B017  Hydra's errors, an AssertionError, anything but a pass
            check_command(wrong)


def named_paths(doc: Path) -> list[tuple[str, str | None]]:
    text = doc.read_text()
    links = [link for link in re.findall(r"\]\(([^)#\s]+)", text) if "://" not in link]
    inline = [m.groups() for code in re.findall(r"`([^`]+)`", text) for m in REPOSITORY_PATH.finditer(code)]
    block_paths = [m.groups() for line in shown_text(doc) for m in REPOSITORY_PATH.finditer(line)]
    return [((doc.parent / link).resolve().relative_to(ROOT).as_posix(), None) for link in links] + inline + block_paths


@cache
def tracked() -> frozenset[str]:
    """The repository's files and folders (a leftover that git ignores is not the repository's)."""
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    return frozenset(files) | {str(parent) for f in files for parent in Path(f).parents if str(parent) != "."}


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.relative_to(ROOT).as_posix())
def test_every_repository_path_the_docs_name_exists(doc):
    missing = []
    for path, test in named_paths(doc):
        path = path.rstrip(".,:;)").rstrip("/")
        if "<" in path or path.startswith(WHEEL_ONLY):
            continue
        matches = sorted(fnmatch.filter(tracked(), path)) if "*" in path else [path] if path in tracked() else []
        if not matches:
            missing.append(path)
        elif test is not None and f"def {test.split('[')[0]}(" not in (ROOT / matches[0]).read_text():
            missing.append(f"{path}::{test}")
    assert not missing, f"{doc.name} names what the repository does not hold: {sorted(set(missing))}"


DOTTED = re.compile(r"^((?:segnet|ops)(?:\.\w+)+)$")


def importable(dotted: str) -> bool:
    """Whether `dotted` is a module, or a name that a module defines."""
    module, _, name = dotted.rpartition(".")
    try:
        if importlib.util.find_spec(dotted) is not None:
            return True
    except ModuleNotFoundError:  # a name inside a module, not a submodule
        pass
    return hasattr(importlib.import_module(module), name)  # find_spec gives None for a package's name


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.relative_to(ROOT).as_posix())
def test_every_module_the_docs_name_imports(doc):
    """`segnet.x.y` in a doc is a module, or a name a module defines."""
    missing = [code for code in {c for c in re.findall(r"`([^`]+)`", doc.read_text()) if DOTTED.match(c)}
               if not importable(code)]
    assert not missing, f"{doc.name} names modules that do not exist: {sorted(missing)}"


def listed_options(cell: str) -> set[str]:
    """The options a row of the group table names: the words before its first colon, outside
    parentheses."""
    names = re.sub(r"\([^)]*\)", "", cell.split(":")[0])
    return {word for word in re.findall(r"\w+", names) if word not in ("presets", "and")}


def test_the_group_table_lists_the_options_there_are():
    table = (ROOT / "docs" / "training.md").read_text()
    rows = dict(re.findall(r"^\| `([\w/]+)` \| (.+) \|$", table, re.MULTILINE))
    for group in sorted(p for p in CONF.iterdir() if p.is_dir() and p.name not in ("hydra", "paths")):
        options = {p.stem for p in group.glob("*.yaml")}
        assert listed_options(rows.get(group.name, "")) == options, f"conf/{group.name}: the group table lists " \
            f"{sorted(listed_options(rows.get(group.name, '')))}, the folder holds {sorted(options)}"


def test_the_readme_is_short():
    words = len((ROOT / "README.md").read_text().split())
    assert words <= README_WORDS, f"README.md has {words} words; move details into docs/"


def test_every_guide_is_short():
    long = {g.name: len(g.read_text().split()) for g in GUIDES if len(g.read_text().split()) > GUIDE_WORDS}
    assert not long, f"guides over {GUIDE_WORDS} words (split them by task, move tables to docs/results/): {long}"


def test_the_architecture_page_is_there_and_linked_from_the_readme():
    architecture = ROOT / "docs" / "architecture.md"
    assert architecture.is_file() and len(architecture.read_text().split()) <= GUIDE_WORDS
    assert "docs/architecture.md" in linked_pages(ROOT / "README.md")


def test_every_results_page_says_when_where_and_at_which_commit():
    """Its date, commit and machine (or that they were not recorded), near its top."""
    missing = {}
    for page in RESULTS:
        head = "\n".join(page.read_text().splitlines()[:25]).lower()
        missing[page.name] = [word for word in ("date", "commit", "machine") if word not in head]
    assert not any(missing.values()), {page: words for page, words in missing.items() if words}


def test_every_page_is_linked_from_another():
    linked = {target for doc in DOCS for target in linked_pages(doc) - {doc.relative_to(ROOT).as_posix()}}
    pages = {doc.relative_to(ROOT).as_posix() for doc in DOCS[1:]}
    assert not pages - linked, f"pages nothing links to: {sorted(pages - linked)}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors of a Markdown file's headings (outside code blocks), repeats numbered as GitHub does."""
    seen: dict[str, int] = {}
    found, in_block = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_block = not in_block
        elif not in_block and re.match(r"^#{1,6} ", line):
            base = slug(line.lstrip("#"))
            found.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return frozenset(found)


def links(doc: Path) -> list[tuple[str, str]]:
    """A doc's relative links: (the target's repository path, its anchor or "")."""
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        full = (doc.parent / path).resolve() if path else doc
        found.append((full.relative_to(ROOT).as_posix(), anchor))
    return found


def linked_pages(doc: Path) -> set[str]:
    return {path for path, _ in links(doc) if path.endswith(".md")}


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.relative_to(ROOT).as_posix())
def test_every_link_and_anchor_lands(doc):
    broken = [f"{path}#{anchor}" if anchor else path for path, anchor in links(doc)
              if not (ROOT / path).exists() or (anchor and anchor not in anchors(ROOT / path))]
    assert not broken, f"{doc.name} links to what is not there: {broken}"


DOCS_PATH = re.compile(r"(?<![\w/.-])(docs/[\w/.-]*\w)(?:#([\w-]+))?")


def test_every_docs_path_the_code_names_exists():
    """Code, configuration, scripts, tests and the Makefile that cite docs/ cite a file (and a
    heading) that is there."""
    missing = []
    for path in tracked_text():
        if path.suffix == ".md" or path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for named, anchor in DOCS_PATH.findall(line):
                target = ROOT / named
                if not target.exists() or (anchor and anchor not in anchors(target)):
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {named}{'#' + anchor if anchor else ''}")
    assert not missing, "\n".join(missing)


def tracked_text() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    return [ROOT / n for n in names if Path(n).suffix in {".py", ".md", ".yaml", ".toml", ".h", ".cpp", ".cu", ".sh"}
            or n in ("Makefile", ".ci/run")]


def test_no_text_refers_to_issues_or_sessions():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in tracked_text() for number, line in enumerate(path.read_text().splitlines(), 1)
             if any(pattern.search(line) for pattern in ABOUT_ITS_MAKING) and path != Path(__file__)]
    assert not found, "\n".join(found)
