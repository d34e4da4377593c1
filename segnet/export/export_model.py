"""From an export_model config to a model package (segnet.inference.package): what
segnet-export-model runs. A choice (segnet-find-best-configuration's) is packed only as it was
scored: its runs' checkpoints as their sha256 then says, and its tta."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from ops.library import BASE_CUDA_ARCHS, NEWER_CUDA_ARCHS
from segnet.checkpoints.paths import check_checkpoint_file
from segnet.checkpoints.settings import RunSettings
from segnet.errors import ConfigError
from segnet.export.exporter import FORMATS, export_network, metadata_path
from segnet.export.onnx_export import ONNX, export_onnx
from segnet.files import atomic_path
from segnet.inference.component_rules import NONE, rules_files, rules_for
from segnet.inference.loading import load_for_inference
from segnet.inference.package import (
    CHECKPOINT,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    RULES,
    segnet_version,
    source_digests,
)
from segnet.nnunet.folder import is_model_checkpoint, run_checkpoint
from segnet.nnunet.plans import checkpoint_settings
from segnet.progress import step

log = logging.getLogger(__name__)
USAGE = "segnet-export-model 'runs=[RUN, ...]' output=MODEL.zip (or choice=BEST/best_configuration.json)"


def chosen_runs(cfg: DictConfig) -> tuple[list[Path], dict[str, Any] | None, str, str]:
    """The runs to package, the choice they come from (segnet-find-best-configuration's), the
    postprocessing to take (the choice's own where postprocessing=auto) and each run's checkpoint
    (the one the choice scored)."""
    if cfg.get("choice"):
        path = Path(cfg.choice)
        if not path.is_file():
            raise ConfigError(f"choice={path} is not a file; give segnet-find-best-configuration's "
                              "best_configuration.json")
        choice = json.loads(path.read_text())
        runs = [Path(run) for name in choice["configurations"] for run in choice["runs"][name].values()]
        rules = str(path.parent / RULES) if cfg.postprocessing == "auto" else cfg.postprocessing
        return runs, choice, rules, choice.get("checkpoint", cfg.checkpoint)
    if not cfg.get("runs"):
        raise ConfigError(f"runs or choice is required: {USAGE}")
    return [Path(run) for run in cfg.runs], None, cfg.postprocessing, cfg.checkpoint


def package_tta(choice: dict[str, Any] | None) -> bool:
    """How the package predicts: mirrored or not as its choice was scored, else as segnet-predict
    mirrors by default."""
    return True if choice is None else bool(choice["tta"])


def check_as_scored(choice_file: Path, choice: dict[str, Any], runs: list[Path], checkpoint_name: str,
                    digests: list[str]) -> None:
    """Each run's checkpoint is the one the choice scored (its sha256 then); a ConfigError naming
    the first that is not: a run retrained or replaced since would be packed under scores it never
    earned."""
    scored = choice.get("checkpoint_sha256")
    again = "run segnet-find-best-configuration again, or package the runs as they are now with runs=[...]"
    if scored is None:
        raise ConfigError(f"choice={choice_file} does not record its runs' checkpoints (a choice of an older "
                          f"segnet), so what it scored cannot be told from what is there now: {again}")
    for run, digest in zip(runs, digests, strict=True):
        then = scored.get(str(run.resolve()))
        if then != digest:
            raise ConfigError(f"choice={choice_file}: {run}'s checkpoints/{checkpoint_name} is not the one the "
                              f"choice scored (sha256 {str(then)[:12]} then, {digest[:12]} now): it was retrained or "
                              f"replaced since; {again}")


def packed(checkpoint: Path, content: bytes) -> bytes:
    """A run's checkpoint as its package holds it: a fold of an nnU-Net model as a segnet run's
    checkpoint (segnet.inference.nnunet_model.as_run_checkpoint), which the package's loader reads."""
    if not is_model_checkpoint(checkpoint):
        return content
    from segnet.inference.nnunet_model import (
        as_run_checkpoint,  # the peer extra's network package, for nnU-Net folds only
    )

    buffer = io.BytesIO()
    torch.save(as_run_checkpoint(checkpoint), buffer)
    return buffer.getvalue()


def model_entry(run: Path, index: int, digest: str, settings: RunSettings) -> dict[str, Any]:
    return {"file": f"models/{index}/{CHECKPOINT}", "sha256": digest, "run": str(run.resolve()),
            "configuration": settings.configuration, "fold": settings.fold}


def exported_members(index: int, checkpoint: Path, formats: list[str], device: str) -> dict[str, bytes]:
    """The model's network exported in each format (segnet-export's), with its model.json, as
    package members: what predicts without segnet's training stack (torch and the op library;
    for onnx, any ONNX runtime)."""
    members = {}
    with tempfile.TemporaryDirectory() as folder:
        for export_format in formats:
            if export_format == ONNX:  # from the op's plain-torch form, for any device
                written = Path(folder) / f"{ONNX}.onnx"
                export_onnx(load_for_inference(checkpoint, "cpu", "python"), written)
            else:
                written = Path(folder) / f"{export_format}.pt2"
                export_network(load_for_inference(checkpoint, device, "cuda" if device == "cuda" else "cpp"), written,
                               export_format)
            members[f"models/{index}/exports/{written.name}"] = written.read_bytes()
            members[f"models/{index}/exports/{export_format}.json"] = metadata_path(written).read_bytes()
    return members


def export_model_command(cfg: DictConfig) -> dict[str, Any]:
    formats = list(cfg.exports or [])
    unknown = sorted(set(formats) - {*FORMATS, ONNX})
    if unknown:
        raise ConfigError(f"exports={formats}: {', '.join(unknown)} is no export format; use "
                          f"{', '.join((*FORMATS, ONNX))}")
    if formats and cfg.device not in ("cpu", "cuda"):
        raise ConfigError(f"device={cfg.device}: name the device the exports will run on, device=cpu or device=cuda")
    runs, choice, postprocessing, checkpoint_name = chosen_runs(cfg)
    checkpoints = [run_checkpoint(run, checkpoint_name) for run in runs]
    for checkpoint in checkpoints:
        check_checkpoint_file(checkpoint, "runs", f"training run folders ({USAGE})")
    contents = [checkpoint.read_bytes() for checkpoint in checkpoints]  # read once: packed as checked
    digests = [hashlib.sha256(content).hexdigest() for content in contents]
    contents = [packed(checkpoint, content) for checkpoint, content in zip(checkpoints, contents, strict=True)]
    if choice is not None:
        check_as_scored(Path(cfg.choice), choice, runs, checkpoint_name, digests)
    settings = [checkpoint_settings(checkpoint) for checkpoint in checkpoints]
    cascades = [str(run) for run, each in zip(runs, settings, strict=True) if each.previous_stage]
    if cascades:
        raise ConfigError(f"runs: {', '.join(cascades)} is a cascade, whose first stage lies in other run folders; "
                          "a package does not hold a cascade yet: predict with segnet-predict 'ckpt_path=[...]'")
    first = settings[0]
    for run, each in zip(runs[1:], settings[1:], strict=True):
        for key, value in each.shared().items():
            if value != first.shared()[key]:
                raise ConfigError(f"runs: {run} trained data.{key}={value} but {runs[0]} {first.shared()[key]}; "
                                  "a package's models predict one dataset's classes")
    rules = rules_for(postprocessing, runs)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "segnet_version": segnet_version(),
        "segnet_source": source_digests(),
        "models": [model_entry(run, i, digest, each)
                   for i, (run, digest, each) in enumerate(zip(runs, digests, settings, strict=True))],
        "class_names": list(first.class_names), "in_channels": first.in_channels,
        "channel_names": first.geometry.normalized_channels(), "regions": first.regions,
        "postprocessing": rules.to_json(), "tta": package_tta(choice),
        "temperature": None if choice is None else choice.get("temperature"),  # temperature=fitted applies it
        "postprocessing_from": [str(p.resolve()) for p in rules_files(postprocessing, runs)],
        "choice": None if choice is None else {key: choice.get(key) for key in ("best", "configurations", "rule",
                                                                                 "means", "tta", "checkpoint")},
        "op": {"backends": ["python", "cpp", "cuda"], "cuda_capabilities": [*BASE_CUDA_ARCHS, *NEWER_CUDA_ARCHS],
               "note": "python runs anywhere; cpp and cuda are compiled on first use unless a wheel ships them"},
        "exports": {"formats": formats, "device": cfg.device if formats else None},
    }
    # the rules as the file they were decided into says them (with where they were decided)
    sources = rules_files(postprocessing, runs)
    rules_text = sources[0].read_text() if sources else json.dumps(rules.to_json(), indent=2)
    members = {}
    for i, (run, checkpoint, content) in enumerate(zip(runs, checkpoints, contents, strict=True)):
        members[f"models/{i}/{CHECKPOINT}"] = content
        if (run / "config.yaml").is_file():
            members[f"models/{i}/config.yaml"] = (run / "config.yaml").read_bytes()
        if rules != NONE:
            members[f"models/{i}/{RULES}"] = rules_text.encode()
        if formats:
            with step(f"exporting {run} as {', '.join(formats)}", i + 1, len(runs)):
                members.update(exported_members(i, checkpoint, formats, cfg.device))
    manifest["files"] = {name: hashlib.sha256(content).hexdigest() for name, content in members.items()}
    output = Path(cfg.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(output) as temporary, zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            archive.writestr(name, content, compress_type=zipfile.ZIP_STORED if name.endswith(".ckpt") else None)
        archive.writestr(MANIFEST, json.dumps(manifest, indent=2))
    log.info("%d model(s) packaged into %s; predict with segnet-predict model=%s input=... output=...", len(runs),
             output, output)
    return OmegaConf.to_container(OmegaConf.create(manifest))
