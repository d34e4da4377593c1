"""segnet's packages depend one way: each imports only from the layers below it, at the top of a
module or inside a function, and each imports alone (no cycle that only a lucky import order
hides)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "segnet"

# Lowest first. A package may import from any package of an earlier layer, and from none of its
# own layer or a later one; the stages run data <- planning <- preprocessing <- training, and
# prediction needs a trained network (segnet.inference.trained_model), not the training code.
LAYERS = (
    ("import_hooks",),
    ("errors", "files", "cluster", "metrics", "monai_import", "library_output", "progress"),
    ("topology_metrics", "fold_numbers"),
    ("data",),
    ("checkpoints",),  # a run's settings load its images as data does (segnet.checkpoints.settings)
    ("nnunet",),  # nnU-Net's folders, plans, checkpoints and network: what a model, a run or a prediction reads
    ("generated",),
    ("config",),
    ("config_comments", "config_keys", "unused_run_folder"),
    ("command_help",),
    ("commands",),
    ("model",),
    ("planning",),
    ("preprocessing",),
    ("inference",),
    ("training",),
    ("evaluation", "export"),
    ("postprocessing",),
    ("command_runs",),
)
LAYER_OF = {name: depth for depth, names in enumerate(LAYERS) for name in names}


def top_name(path: Path) -> str:
    """The first-level name under segnet/ that a module belongs to (a package or a module)."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def absolute(node: ast.ImportFrom, path: Path) -> str:
    """The module a `from ... import` names, its relative form resolved against `path`."""
    if node.level == 0:
        return node.module or ""
    package = list(path.relative_to(ROOT).with_suffix("").parts)[:-node.level]
    return ".".join(package + ([node.module] if node.module else []))


def imported_names(path: Path) -> set[str]:
    return imported_names_of(path.read_text(), path)


def imported_names_of(source: str, path: Path) -> set[str]:
    """The first-level segnet names the module at `path` imports, wherever in it it does."""
    modules = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = absolute(node, path)
            # `from segnet import training` imports a package as a name
            modules += [f"{base}.{alias.name}" for alias in node.names] if base == "segnet" else [base]
        elif isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
    return {m.split(".")[1] for m in modules if m.startswith("segnet.")}


def imported_at_import(path: Path) -> set[str]:
    """The first-level segnet names the module at `path` imports when it is imported: outside its
    functions."""
    tree = ast.parse(path.read_text())
    module_level = [node for node in tree.body if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return imported_names_of(ast.unparse(ast.Module(body=module_level, type_ignores=[])), path)


def test_every_package_is_in_a_layer():
    present = {top_name(p) for p in PACKAGE.glob("*") if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert present - {"__init__"} == set(LAYER_OF), "add the new package to LAYERS (or drop a removed one)"


def test_imports_point_down_the_layers():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = top_name(path)
        # segnet/__init__.py runs before any of its modules: it may import the two lowest layers only
        # when it runs; its API's functions (segnet.load_model) import what they call when called
        floor = 2 if here == "__init__" else LAYER_OF[here]
        names = imported_at_import(path) if here == "__init__" else imported_names(path)
        for name in names - {here}:
            if LAYER_OF[name] >= floor:
                upward.append(f"{path.relative_to(ROOT)} imports segnet.{name}")
    assert not upward, "\n".join(upward)


def test_no_two_modules_share_a_name():
    """One name per thing: no two modules or packages under segnet/ share a name (a module's
    without .py), so a name in an import, a traceback or a doc says which one it is."""
    names: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*")):
        if path.name == "__init__.py" or "__pycache__" in path.parts:
            continue
        if path.suffix == ".py" or (path / "__init__.py").is_file():
            names.setdefault(path.name.removesuffix(".py"), []).append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in names.items() if len(paths) > 1}
    assert not shared, f"rename one of each: {shared}"


@pytest.mark.parametrize("source", [
    "def f():\n    from segnet.training.module import SegmentationModule\n",  # inside a function
    "from segnet import training\n",
    "from ..training import module\n",  # relative, from segnet/inference/
    "import segnet.training.train\n",
])
def test_the_rule_sees_every_form_of_import(source):
    module = PACKAGE / "inference" / "m.py"  # only parsed, never written: the path places it
    assert imported_names_of(source, module) == {"training"}


# Every module of each package, imported in a process of its own that had imported no segnet
# module: a cycle that only a lucky import order hides fails here, and so does a module that loads
# a package of a higher layer at import. The processes are forks of one interpreter that loaded
# the third-party libraries segnet uses (which import nothing of segnet) and nothing else: the
# order of segnet's own imports is each package's alone, and the seconds of torch, Lightning and
# MONAI are paid once instead of once per package.
IMPORT_EACH_ALONE = """
import importlib, json, os, pkgutil, sys, traceback
import hydra, lightning, matplotlib, monai, nibabel, numpy, omegaconf, scipy, skimage, torch, tqdm
assert not any(m == "segnet" or m.startswith("segnet.") for m in sys.modules)

def import_all(name):
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(getattr(package, "__path__", []), package.__name__ + "."):
        importlib.import_module(module.name)
    return sorted({m.split(".")[1] for m in sys.modules if m.startswith("segnet.")})

results = {}
for name in sys.argv[1:]:
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        try:
            outcome = {"loaded": import_all(f"segnet.{name}")}
        except BaseException:
            outcome = {"error": traceback.format_exc()}
        with os.fdopen(write, "w") as pipe:
            json.dump(outcome, pipe)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        results[name] = json.load(pipe)
    os.wait()
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def imported_alone() -> dict[str, dict]:
    """IMPORT_EACH_ALONE for every package: {package: {"loaded": [...]} or {"error": traceback}}."""
    ran = subprocess.run([sys.executable, "-c", IMPORT_EACH_ALONE, *sorted(LAYER_OF)], capture_output=True,
                         text=True, cwd=ROOT, timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads(ran.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", sorted(LAYER_OF))
def test_each_package_imports_alone_and_loads_nothing_above_it(name, imported_alone):
    outcome = imported_alone[name]
    assert "error" not in outcome, outcome.get("error")
    # segnet/__init__.py's own imports come with any module of segnet, whichever it is
    with_every_module = imported_names(PACKAGE / "__init__.py")
    above = [m for m in outcome["loaded"] if LAYER_OF[m] > LAYER_OF[name] and m not in with_every_module]
    assert not above, f"importing segnet.{name} loads {above}"
