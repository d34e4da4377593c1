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
# prediction needs a trained network (segnet.inference.model), not the training code.
LAYERS = (
    ("errors", "files", "cluster", "metrics"),
    ("data",),
    ("config",),
    ("commands",),
    ("model",),
    ("planning",),
    ("preprocessing",),
    ("inference",),
    ("training",),
    ("evaluation", "export"),
)
LAYER_OF = {name: depth for depth, names in enumerate(LAYERS) for name in names}


def top_name(path: Path) -> str:
    """The first-level name under segnet/ that a module belongs to (a package or a module)."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def imported_names(path: Path) -> set[str]:
    """The first-level segnet names a module imports, wherever in the module it does."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue  # segnet's modules import each other absolutely
        names.update(m.split(".")[1] for m in modules if m.startswith("segnet.") and m.count(".") >= 1)
    return names


def test_every_package_is_in_a_layer():
    present = {top_name(p) for p in PACKAGE.glob("*") if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert present - {"__init__"} == set(LAYER_OF), "add the new package to LAYERS (or drop a removed one)"


def test_imports_point_down_the_layers():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = top_name(path)
        for name in imported_names(path) - {here}:
            if LAYER_OF[name] >= LAYER_OF[here]:
                upward.append(f"{path.relative_to(ROOT)} imports segnet.{name}")
    assert not upward, "\n".join(upward)


def test_the_rule_sees_a_function_level_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from segnet.training.module import SegmentationModule\n")
    assert imported_names(module) == {"training"}


@pytest.mark.parametrize("name", sorted(LAYER_OF))
def test_each_package_imports_alone_and_loads_nothing_above_it(name):
    loaded = subprocess.run(
        [sys.executable, "-c", f"import json, sys, segnet.{name}; "
                               "print(json.dumps(sorted({m.split('.')[1] for m in sys.modules "
                               "if m.startswith('segnet.')})))"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    above = [m for m in json.loads(loaded.stdout.splitlines()[-1]) if LAYER_OF[m] > LAYER_OF[name]]
    assert not above, f"importing segnet.{name} loads {above}"
