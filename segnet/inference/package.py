"""A trained model as one file to hand on, as nnU-Net's nnUNetv2_export_model_to_zip makes one:
segnet-export-model 'runs=[RUN, ...]' output=MODEL.zip, and segnet-predict model=MODEL.zip.

The package is a zip holding, for each run (a fold of a configuration), its checkpoint's final
weights with the plan they carry (models/<i>/checkpoints/final.ckpt), its resolved training
configuration (config.yaml), the postprocessing rules (postprocessing.json) and, where asked
(exports=[aoti, exported_program]), its network exported as segnet-export writes it
(exports/<format>.pt2 and its .json: what predicts with torch and the op library alone), and
model.json: what the package is (its format, and the segnet that wrote it: its version and the
sha256 of each of its source files), each model's file and sha256, its configuration and fold,
the class and channel names, the rules, the choice of segnet-find-best-configuration where one was
given, how it predicts (tta: the choice's, as it was scored) and what the op needs.

Prediction unpacks it once into a folder named by its sha256 (under $SEGNET_MODELS, else
~/.cache/segnet/models), every member checked against its sha256 in model.json on every use (a
checkpoint changed there is refused), and predicts with the models there exactly as its choice
scored the runs' checkpoints: the same weights, plans, rules and tta (segnet-predict's tta=true or
false overrides the package's). A file that is no zip, a member that is missing or altered, or a
package of another format or segnet version is refused in one line; one written by a segnet of
the same version but other source (a development checkout, where the version stays the same) is
predicted with a warning naming the source files that differ, since its label maps may then differ from
those its choice scored.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import tempfile
import zipfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

from segnet.data.derived import file_digest
from segnet.errors import ConfigError

log = logging.getLogger(__name__)
MANIFEST = "model.json"
FORMAT = "segnet-model-package"
FORMAT_VERSION = 2  # 2: model.json says how the package predicts (tta) and the source that wrote it
CHECKPOINT = "checkpoints/final.ckpt"  # within each model's folder, as in a run folder
RULES = "postprocessing.json"


def segnet_version() -> str:
    return version("segnet")


@functools.cache
def source_digests() -> dict[str, str]:
    """The sha256 (its first 16 digits) of each source file of this segnet (segnet/...py): what
    tells one segnet's code from another's, where segnet_version() stays the same across changes
    and an installed wheel has no git to ask."""
    package = Path(__file__).resolve().parents[1]
    return {path.relative_to(package.parent).as_posix(): file_digest(path)[:16]
            for path in sorted(package.rglob("*.py"))}


def changed_sources(recorded: dict[str, str]) -> list[str]:
    """The source files of segnet that differ from `recorded` (source_digests() of the segnet that
    wrote a package): changed, added or removed since."""
    current = source_digests()
    return sorted(name for name in recorded.keys() | current.keys() if recorded.get(name) != current.get(name))


def warn_of_other_source(package: Path, manifest: dict[str, Any]) -> None:
    """A warning naming the source files in which this segnet differs from the one that wrote a package:
    a package stays usable across code changes, but its label maps may then differ from those its
    choice scored."""
    changed = changed_sources(manifest["segnet_source"])
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        log.warning("model=%s was written by a segnet whose source differs from this one's in %d file(s) (%s): "
                    "its label maps may differ from those its choice scored; export the runs again with this segnet "
                    "to predict with the code that scores them", package, len(changed), shown)


def models_home() -> Path:
    return Path(os.environ.get("SEGNET_MODELS") or Path.home() / ".cache" / "segnet" / "models")


def read_manifest(package: Path) -> dict[str, Any]:
    """model.json of a package, checked to be a package this segnet reads; a ConfigError saying
    what is wrong otherwise."""
    if not zipfile.is_zipfile(package):
        raise ConfigError(f"model={package} is not a model package (no zip archive): make one with "
                          "segnet-export-model 'runs=[RUN, ...]' output=MODEL.zip")
    try:
        with zipfile.ZipFile(package) as archive:
            manifest = json.loads(archive.read(MANIFEST))
    except (KeyError, ValueError, zipfile.BadZipFile, OSError) as error:
        raise ConfigError(f"model={package} is not a readable model package ({error}); export it again") from None
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"model={package} is a package of format {manifest.get('format')} "
                          f"{manifest.get('format_version')}, not {FORMAT} {FORMAT_VERSION}: export it again with "
                          "this segnet")
    if manifest.get("segnet_version") != segnet_version():
        raise ConfigError(f"model={package} was written by segnet {manifest.get('segnet_version')}, this is segnet "
                          f"{segnet_version()}: predict with that version, or export the runs again with this one")
    return manifest


def check_members(folder: Path, manifest: dict[str, Any], package: Path, advice: str) -> None:
    """Every member of a package in `folder` is the file model.json names (its sha256); a
    ConfigError naming the first that is not, with `advice`."""
    for name, digest in manifest["files"].items():
        member = folder / name
        if not member.is_file() or file_digest(member) != digest:
            raise ConfigError(f"model={package}: {member} is missing or not the file model.json names; {advice}")


def unpacked(package: Path) -> Path:
    """The folder a package's models lie in, unpacked on first use (whole, under a temporary
    name), every member checked against model.json each time: a checkpoint changed there since
    would predict in the package's name."""
    manifest = read_manifest(package)
    folder = models_home() / file_digest(package)[:32]
    if (folder / MANIFEST).is_file():
        check_members(folder, manifest, package, f"it changed since it was unpacked: remove {folder} to unpack the "
                                                 "package again")
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        with zipfile.ZipFile(package) as archive:
            bad = archive.testzip()
            if bad is not None:
                raise ConfigError(f"model={package}: its member {bad} is corrupt (a damaged copy?); copy or export "
                                  "it again")
            archive.extractall(staging)
        check_members(staging, manifest, package, "copy or export the package again")
        if folder.is_dir() and not (folder / MANIFEST).is_file():  # left incomplete by hand: made again
            shutil.rmtree(folder)
        try:
            staging.rename(folder)
        except OSError:  # another process unpacked it meanwhile
            if not (folder / MANIFEST).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


# (package, size, mtime) -> its folder and model.json, within a process
_opened: dict[tuple[str, int, int], tuple[Path, dict[str, Any]]] = {}


def opened(package: Path) -> tuple[Path, dict[str, Any]]:
    """A package's folder, unpacked, and its model.json (once per process: the commands ask several
    times)."""
    stat = package.stat()
    key = (str(package.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _opened:
        folder = unpacked(package)
        manifest = json.loads((folder / MANIFEST).read_text())
        warn_of_other_source(package, manifest)
        _opened[key] = folder, manifest
    return _opened[key]


def package_checkpoints(package: Path) -> list[Path]:
    """The checkpoint of every model in a package, unpacked."""
    folder, manifest = opened(package)
    return [folder / entry["file"] for entry in manifest["models"]]


def package_tta(package: Path) -> bool:
    """Whether a package predicts mirrored: as its choice was scored (segnet-find-best-configuration's
    tta), else as segnet-predict does by default."""
    return opened(package)[1]["tta"]


def package_temperature(package: Path) -> dict[str, float] | None:
    """The temperature per configuration its choice fitted (segnet.inference.temperature), if any."""
    return opened(package)[1].get("temperature")
