"""A mutation check of our own: do the tests of a feature fail when that feature breaks?

    python scripts/mutation_check.py                      # every mutant (10-20 minutes on 2 cores)
    python scripts/mutation_check.py --list               # the mutants, what each breaks, their tests
    python scripts/mutation_check.py --only splits-seed normalization-clip
    python scripts/mutation_check.py --baseline           # the same tests, unmutated: they must pass
    python scripts/mutation_check.py --keep               # keep the copy and each pytest log

Each mutant in scripts/mutants.yaml is one text replacement in one tracked file: `old` must
occur exactly once in that file. The tracked files (`git ls-files`) are copied once into a temporary
folder; for each mutant the replacement is applied there, only that mutant's tests are run
there, and the file is put back:

    python -m pytest TESTS -x -q -p no:cacheprovider --basetemp=...   (cwd = the copy)

with PYTHONPATH=<copy>:<copy>/tests, so the copy's modules are imported and not the editable
install's /work/main (checked once, before the first mutant: the check stops if `import segnet`
or `import ops` resolves outside the copy). A mutant of csrc/ runs with SEGNET_OPS_CACHE set to
a folder of its own, so the compiled op is rebuilt from the mutated sources. The other mutants
share one op cache of the run, which builds the op once per run and is removed afterwards (kept
with --keep); the user's default cache is never touched, though it would serve the copy, since
builds are cached by their sources' content (ops/library.py).

Results:
- killed: pytest exited with failures (1), or was interrupted (2, e.g. the mutated module does
  not import): the tests caught the broken feature;
- SURVIVED: the tests passed with the feature broken; they do not check it;
- not applied: `old` is not in the file exactly once; the code moved on and the mutant must be
  updated with it;
- timeout: the tests ran past the mutant's timeout (a hang or a slow machine: raise `timeout`);
- error: pytest could not run the selection (bad arguments, 4) or selected no test (5).
The script exits 0 only when every mutant run was killed (with --baseline: every selection
passed), 1 otherwise, 2 when the copy does not import its own modules.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str  # the feature, as the table says it
    path: str  # relative to the checkout
    old: str  # occurs exactly once in path
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, -k, -m
    timeout: int = 300  # seconds for the whole pytest run


MUTANTS_FILE = Path(__file__).with_name("mutants.yaml")


def load_mutants(path: Path = MUTANTS_FILE) -> tuple[Mutant, ...]:
    """The mutants of `path` (a YAML list of mappings); SystemExit naming the entry that is malformed."""
    try:
        entries = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        sys.exit(f"mutation_check: cannot read the mutants from {path}: {error!r}")
    mutants, seen = [], set()
    for number, entry in enumerate(entries or (), 1):
        try:
            mutant = Mutant(**{**entry, "tests": tuple(entry["tests"])})
        except (KeyError, TypeError) as error:
            name = entry.get("name", "no name") if isinstance(entry, dict) else "not a mapping"
            sys.exit(f"mutation_check: {path}, mutant {number} ({name}): {error!r}")
        if mutant.name in seen:
            sys.exit(f"mutation_check: {path}: two mutants are named {mutant.name}")
        seen.add(mutant.name)
        mutants.append(mutant)
    return tuple(mutants)

RESULT_OK = {"killed"}


def checkout_root() -> Path:
    return Path(__file__).resolve().parents[1]


def copy_tracked(root: Path, target: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = root / name
        if not source.is_file():  # deleted in the work tree but not in the index
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / name)


def environment(copy: Path, ops_cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": f"{copy}{os.pathsep}{copy / 'tests'}",
        "SEGNET_OPS_CACHE": str(ops_cache),
        "PYTHONDONTWRITEBYTECODE": "1",  # no .pyc of a mutant can outlive it
    })
    return env


def check_imports(copy: Path, env: dict[str, str]) -> None:
    """Fails loudly unless the copy's own packages are the ones imported there."""
    probe = "import segnet, ops, helpers; print(segnet.__file__); print(ops.__file__); print(helpers.__file__)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=copy, env=env, capture_output=True, text=True)
    files = done.stdout.split()
    outside = [f for f in files if not Path(f).resolve().is_relative_to(copy.resolve())]
    if done.returncode != 0 or len(files) != 3 or outside:
        sys.exit(f"mutation_check: the copy {copy} does not import its own modules ({outside or done.stderr[-2000:]}); "
                 "every mutant would test the checkout instead")


def run_pytest(copy: Path, tests: tuple[str, ...], env: dict[str, str], basetemp: Path, timeout: int,
               log: Path) -> tuple[int | None, str]:
    """pytest's exit status (None: timed out; its process group is killed) and its output."""
    basetemp.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider", f"--basetemp={basetemp}"]
    with subprocess.Popen(command, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
            code: int | None = process.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            code = None
    log.write_text(output)
    return code, output


def first_failure(output: str) -> str:
    match = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    return match.group(1).split("::")[-1] if match else ""


def classify(code: int | None, baseline: bool) -> str:
    if code is None:
        return "timeout"
    if code in (4, 5):
        return "error"
    if baseline:
        return "passed" if code == 0 else "FAILED"
    return "SURVIVED" if code == 0 else "killed"


def applies(root: Path, m: Mutant) -> bool:
    file = root / m.path
    return file.is_file() and file.read_text().count(m.old) == 1


@contextlib.contextmanager
def mutated(file: Path, old: str, new: str):
    """The file with `old` (there exactly once) replaced by `new`; put back, with its modification
    time, afterwards."""
    text = file.read_text()
    stat = file.stat()
    file.write_text(text.replace(old, new))
    try:
        yield
    finally:
        file.write_text(text)
        os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def print_table(rows: list[dict[str, str]]) -> None:
    columns = ("mutant", "breaks", "tests", "result", "by", "seconds")
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    print(" | ".join(c.ljust(widths[c]) for c in columns))
    print("-+-".join("-" * widths[c] for c in columns))
    for row in rows:
        print(" | ".join(row[c].ljust(widths[c]) for c in columns))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy and the pytest logs")
    parser.add_argument("--baseline", action="store_true",
                        help="run each selected mutant's tests on the unmutated copy (they must pass)")
    args = parser.parse_args()

    mutants = load_mutants()
    known = {m.name for m in mutants}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        parser.error(f"unknown mutant(s) {', '.join(unknown)}; --list shows them")
    selected = [m for m in mutants if not args.only or m.name in args.only]
    root = checkout_root()
    if args.list:
        for m in selected:
            state = "" if applies(root, m) else " [NOT APPLIED: its old text is not in the file exactly once]"
            print(f"{m.name}: {m.breaks}{state}\n    {m.path}\n"
                  f"    pytest {shlex.join(m.tests)} (timeout {m.timeout} s)")
        return 0

    work = Path(tempfile.mkdtemp(prefix="segnet-mutation-"))
    copy = work / "tree"
    started = time.perf_counter()
    rows = []
    try:
        copy_tracked(root, copy)
        shared_cache = work / "ops-cache"
        check_imports(copy, environment(copy, shared_cache))
        print(f"mutation_check: {len(selected)} mutant(s) in {copy}{' (baseline: unmutated)' if args.baseline else ''}",
              flush=True)
        for m in selected:
            cache = work / f"ops-cache-{m.name}" if m.path.startswith("csrc/") and not args.baseline else shared_cache
            row = {"mutant": m.name, "breaks": m.breaks, "tests": shlex.join(m.tests), "by": "", "seconds": ""}
            begin = time.perf_counter()
            with contextlib.ExitStack() as stack:
                if not applies(copy, m):
                    row["result"] = "not applied"
                else:
                    if not args.baseline:
                        stack.enter_context(mutated(copy / m.path, m.old, m.new))
                    code, output = run_pytest(copy, m.tests, environment(copy, cache), work / "pytest" / m.name,
                                              m.timeout, work / f"{m.name}.log")
                    row["result"] = classify(code, args.baseline)
                    row["by"] = first_failure(output)
            row["seconds"] = f"{time.perf_counter() - begin:.0f}"
            rows.append(row)
            print(f"  {m.name}: {row['result']} {row['by']} ({row['seconds']} s)", flush=True)
    finally:
        if args.keep:
            print(f"mutation_check: kept {work} (tree/, <mutant>.log)")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print_table(rows)
    good = {"passed"} if args.baseline else RESULT_OK
    bad = [r["mutant"] for r in rows if r["result"] not in good]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} {'passed' if args.baseline else 'killed'} in "
          f"{time.perf_counter() - started:.0f} s" + (f"; not {'passed' if args.baseline else 'killed'}: "
                                                     f"{', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
