"""Which model made the label maps in a prediction folder, so that continue=true never mixes two
models' outputs.

segnet-predict records its model in the output folder (predicted_by.json) before it writes the
first label map: the files the model is read from (each checkpoint of an ensemble, or an
export's package and its model.json), each by its path and sha256, hashed once per run; their
classes and the plan of each configuration; tta; the postprocessing rules and the files they
came from; a cascade's first-stage checkpoints, whose label maps its own follow from; and an
id, a digest of all that but the paths (a checkpoint moved or copied is the same model). The op
backend and the device are left out: they change no label map beyond rounding. Each label map
carries the id in its header's description, written with it in one rename, so a folder that a
run of another model overwrote in part still tells which model made each file.

The record is created only where there is none, whole, so processes predicting into one folder
agree on it: a second one meets the first one's record and goes on with the same model; with
another, continue=true refuses and continue=false (predict every case again) replaces it, and
removes the label maps (and probabilities) the other model's stamp is on before it writes any, so
that the folder never holds label maps of a model other than the one its record names.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from segnet.checkpoints.paths import FINAL
from segnet.data.dataset_json import image_stem
from segnet.data.derived import digest, file_digest
from segnet.data.image_files import read_stamp
from segnet.errors import ConfigError
from segnet.files import temporary_beside, write_json
from segnet.inference.component_rules import Rules
from segnet.inference.ensemble import Predictor

log = logging.getLogger(__name__)
RECORD = "predicted_by.json"
STAMP = "segnet-predict model "  # then the id: a label map's header description


def identity(record: dict[str, Any]) -> dict[str, Any]:
    """What decides the label maps: the record but where its parts came from (an ensemble's
    members in any order)."""
    identity = {"models": sorted(model["sha256"] for model in record["models"]), "plan": record["plan"],
                "tta": record["tta"], "postprocessing": record["postprocessing"]["rules"]}
    if record.get("first_stage"):  # a cascade's label maps follow from its first stage's weights too
        identity["first_stage"] = sorted(model["sha256"] for model in record["first_stage"])
    return identity


def model_record(files: Sequence[Path], predictor: Predictor, rules: Rules, postprocessing_from: list[Path]) -> dict:
    """The record of a run predicting with the models read from `files` and these rules."""
    plan = {"class_names": predictor.class_names, "in_channels": predictor.in_channels,
            "ignore_label": predictor.ignore_label, "configurations": [c.plan() for c in predictor.configurations]}
    record = {"models": [{"path": str(path.resolve()), "sha256": file_digest(path)} for path in files],
              "plan": plan, "tta": predictor.tta,
              # each configuration's (segnet.inference.temperature): the probabilities', not the label maps'
              "temperature": [c.temperature for c in predictor.configurations],
              "postprocessing": {"rules": rules.to_json(), "from": [str(p.resolve()) for p in postprocessing_from]}}
    if predictor.previous_stage:
        checkpoints = [Path(run) / "checkpoints" / FINAL for run in predictor.previous_stage]
        record["first_stage"] = [{"path": str(path), "sha256": file_digest(path)} for path in checkpoints]
    record = json.loads(json.dumps(record))  # as it reads back from the file: lists for tuples
    return {"id": digest(identity(record), 16), **record}


def stamp(record: dict[str, Any]) -> str:
    """The header description of the label maps this record's model makes."""
    return STAMP + record["id"]


def describe(record: dict[str, Any]) -> str:
    try:
        models = ", ".join(f"{model['path']} (sha256 {model['sha256'][:12]})" for model in record["models"])
        return (f"{models}, tta={json.dumps(record['tta'])}, postprocessing "
                f"{json.dumps(record['postprocessing']['rules'])}")
    except (KeyError, TypeError):
        return f"a model that its {RECORD} does not name"


def differences(found: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """The parts of identity() in which two records differ (all, where `found` lacks one)."""
    try:
        theirs = identity(found)
    except (KeyError, TypeError):
        return list(identity(record))
    return [key for key, value in identity(record).items() if theirs[key] != value]


def read_record(path: Path) -> dict[str, Any]:
    """A folder's record; empty where it cannot be read (someone else's file, an edit gone wrong)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def create_json(path: Path, value: Any) -> bool:
    """Writes `value` to `path`, whole, unless a file is there (another process was first): whether
    it did. A hard link to a file written in full is made only where there is no file."""
    temporary = temporary_beside(path)
    temporary.write_text(json.dumps(value, indent=2) + "\n")
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links (FAT, object-store mounts): no race guard
        write_json(path, value)
    finally:
        temporary.unlink(missing_ok=True)
    return True


def claim(folder: Path, record: dict[str, Any], continuing: bool, label_maps: list[Path]) -> None:
    """Records `record`'s model as the maker of `folder`'s label maps, before any is written; a
    ConfigError where continue=true would add its label maps to another model's (`label_maps`:
    the files this run would write)."""
    path = folder / RECORD
    older = [p for p in label_maps if p.is_file()]
    if continuing and older and not path.exists():
        raise ConfigError(
            f"output={folder} holds {len(older)} label map(s) of this run's cases (e.g. {older[0].name}) but no "
            f"{RECORD}: nothing recorded the model that made them, so continue=true cannot tell whether they are "
            "this model's. Give continue=false to predict every case again, or predict into another output folder")
    folder.mkdir(parents=True, exist_ok=True)
    if create_json(path, record):
        return
    found = read_record(path)
    if found.get("id") == record["id"]:
        return
    if continuing:
        raise ConfigError(
            f"output={folder} holds label maps of another model (its {RECORD}): {describe(found)}; this run's "
            f"model: {describe(record)}; they differ in {', '.join(differences(found, record))}. continue=true "
            "would mix the two models' label maps: predict into another output folder, or give continue=false to "
            "predict every case again with this run's model")
    removed = remove_label_maps(folder, found)
    log.warning("output=%s held label maps of %s; continue=false removed its %d label map(s) there and predicts "
                "every case again with %s", folder, describe(found), len(removed), describe(record))
    write_json(path, record)


def remove_label_maps(folder: Path, found: dict[str, Any]) -> list[Path]:
    """Removes the label maps in `folder` that bear the stamp of the model `found` records, with
    their probabilities: those it removed."""
    if "id" not in found:
        return []
    made = stamp(found)
    removed = []
    for path in sorted(folder.iterdir()):
        name = image_stem(path)
        written = read_stamp(path) if name is not None and path.is_file() else None
        if written is not None and (written == made or written.startswith(made + " ")):
            (folder / f"{name}.npz").unlink(missing_ok=True)
            path.unlink()
            removed.append(path)
    return removed
