"""A trained run's configuration, patch and geometry are read by name in one place: planning
settles them, segnet.training.run_config writes them into the run's configuration, and
segnet.checkpoints.settings (through segnet.checkpoints.reading) reads them back, defaults and
older checkpoints' fill-ins included. Everything else asks the typed RunSettings, so that no module
reads one by a string key with a default of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "segnet"

SETTINGS = frozenset({"patch_size", "configuration", "spacing", "orientation", "crop", "normalization",
                      "spatial_dims"})
OWNERS = ("segnet/planning/", "segnet/training/run_config.py", "segnet/checkpoints/settings.py",
          "segnet/checkpoints/reading.py",
          "segnet/nnunet/",  # nnU-Net's plans, whose keys bear these names, made into a run's settings
          "segnet/training/nnunet_fine_tuning.py")  # ... and carried into a run fine-tuned from one
# Reads of these names that are no run's settings: a case's own voxel spacing.
NOT_THE_RUN = {
    "segnet/training/module.py": {"batch['spacing']"},  # a batch's cases', from the preprocessed cache
    "segnet/preprocessing/datasets.py": {"entry.properties()['spacing']"},  # a preprocessed case's
    "segnet/preprocessing/maps.py": {"entry.properties()['spacing']"},
    "segnet/data/image_files.py": {"json.loads(sidecar.read_text())['spacing']"},  # an image's sidecar
}


def key_reads(source: str) -> list[str]:
    """Each `x["name"]` and `x.get("name", ...)` of a name in SETTINGS, as its source reads."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            key, target = node.slice, node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args):
            key, target = node.args[0], node.func.value
        else:
            continue
        if isinstance(key, ast.Constant) and key.value in SETTINGS:
            found.append(f"{ast.unparse(target)}[{key.value!r}]")
    return found


def test_only_the_settings_owners_read_them_by_key():
    reads = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name.startswith(OWNERS):
            continue
        allowed = NOT_THE_RUN.get(name, set())
        reads += [f"{name}: {read}" for read in key_reads(path.read_text()) if read not in allowed]
    assert not reads, "read them from RunSettings (segnet.checkpoints.settings):\n" + "\n".join(reads)


@pytest.mark.parametrize("source", [
    'data["spatial_dims"]\n',
    'model.data.get("crop")\n',
    'data.get("patch_size", [64, 64])\n',
    'hparams["data"]["orientation"]\n',
])
def test_the_rule_sees_every_form_of_read(source):
    assert len(key_reads(source)) == 1
