"""Fine-tuning (model.init_from=CKPT, nnU-Net's -pretrained_weights): a new run whose network
starts from another run's weights. Only the weights are taken, weights-only: the optimizer, the
schedule and the step count start afresh, as in any new run.

The run is planned with a plan moved from the source run (segnet.planning.moved_plan): its patch
and batch are its own, its orientation, spacing and normalization the source run's. Channels named
otherwise and another normalization scheme are refused, both named, unless init_allow names them.

Every tensor of the network must be in the checkpoint with its shape, but for the heads' rows,
one per class: they are taken by class name, so a class of this dataset that the source run
trained starts from its own row wherever the source numbered it, and a new one from its fresh
initialization, as do deep-supervision heads the checkpoint lacks. Anything else that does not
fit stops the run with the tensors' names, before anything is written.

A model nnU-Net v2 trained (its checkpoint_final.pth, a fold folder, or its trained model folder
of one fold) is a source too: the run trains its network on its grid and intensity scale
(segnet.training.nnunet_fine_tuning), with the same refusals, even when it resumes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from segnet.checkpoints.reading import read_checkpoint
from segnet.checkpoints.settings import RunSettings
from segnet.data.regions import Regions, output_names
from segnet.errors import ConfigError
from segnet.inference.names import check_same_names, run_names, shown
from segnet.planning.moved_plan import apply_moved_plan
from segnet.planning.plan import configuration_name

log = logging.getLogger(__name__)
# the output convolutions, one channel per class: EdgeUNet's, nnU-Net's decoder's
HEADS = ("head.", "supervision_heads.", "network.decoder.seg_layers.")
ALLOWED = ("channels", "normalization")  # the differences from the source run init_allow may accept


def nnunet_source_at(path: Path):
    """The nnU-Net model at `path` (segnet.nnunet.source.NnunetSource), or None where it is not one."""
    from segnet.nnunet.source import nnunet_source  # nnU-Net's models' code: only where the path may be one

    return nnunet_source(path) if path.exists() else None


def source_run(path: Path, edge_places: Sequence[str] = ()) -> tuple[RunSettings, dict[str, torch.Tensor]]:
    """The settings (class names, plan) and the network's weights of a checkpoint of segnet's
    training, read weights-only; or of an nnU-Net model, its weights named as in its network with
    edge layers at `edge_places`."""
    nnunet = nnunet_source_at(path)
    if nnunet is not None:
        return RunSettings.from_data(nnunet.data), nnunet.weights_for(list(edge_places))
    if not path.is_file():
        raise ConfigError(f"model.init_from={path} is not a file; point it at a run's checkpoints/best.ckpt")
    checkpoint, weights = read_checkpoint(path)
    if not weights:
        raise ConfigError(f"model.init_from={path} holds no network weights of segnet's training; point it at a "
                          "run's checkpoints/best.ckpt or last.ckpt")
    data = checkpoint.get("hyper_parameters", {}).get("data")
    if not data or "class_names" not in data:
        raise ConfigError(f"model.init_from={path} lacks the data settings segnet's training saves (class names, "
                          "plan), which fine-tuning matches this run to; point it at a run's checkpoints/best.ckpt")
    return RunSettings.from_data(data), weights


def allowed_differences(cfg: DictConfig) -> set[str]:
    given = cfg.get("init_allow") or []
    allowed = {given} if isinstance(given, str) else set(given)
    if not allowed <= set(ALLOWED):
        raise ConfigError(f"init_allow={sorted(allowed)}: give any of {', '.join(ALLOWED)} (the spacing is always the "
                          "source run's, and the classes are matched by name)")
    return allowed


def schemes(settings: RunSettings) -> tuple[str, ...] | None:
    """The normalization scheme of each channel of a run's inputs; None for generated data, which
    no plan normalizes."""
    normalization = settings.geometry.normalization
    return tuple(entry["scheme"] for entry in normalization) if normalization else None


def fine_tuning_plan(cfg: DictConfig, plan: dict[str, Any] | None, given: DictConfig) -> dict[str, Any] | None:
    """The plan a fine-tuning run trains with (cfg.data set to it; a resume reads its own
    plans.json instead, but from an nnU-Net model, whose network the model section becomes): this
    dataset's, with the source run's geometry and normalization. The plan unchanged for a run that
    is not fine-tuning, or where either run had no plan (generated data: nothing to carry). `given`
    is the data section as composed: the patch and batch the user set."""
    path = cfg.model.get("init_from")
    if path is None:
        return plan
    nnunet = nnunet_source_at(Path(path))
    if cfg.ckpt_path is not None and nnunet is None:
        return plan
    allowed = allowed_differences(cfg)
    source = RunSettings.from_data(nnunet.data) if nnunet is not None else source_run(Path(path))[0]
    data = OmegaConf.to_container(cfg.data, resolve=True)
    here = f"{data['root']}/dataset.json" if "root" in data else f"data={data['name']}"
    own = RunSettings.from_data(data)
    if "channels" not in allowed:
        check_same_names(run_names(source, f"model.init_from={path}"), run_names(own, here),
                         "fine-tune from a run on these channels, or train anyway with init_allow=[channels]",
                         kinds=("channels",))
    same_scale = schemes(source) == schemes(own)
    if not same_scale and "normalization" not in allowed:
        raise ConfigError(
            f"model.init_from={path}'s run normalized its channels as {shown(schemes(source))} but this run "
            f"normalizes them as {shown(schemes(own))} ({here}): its weights learnt inputs on another intensity "
            "scale. Fine-tune from a run on this modality, or train with this dataset's own normalization anyway "
            "with init_allow=[normalization]"
        )
    if nnunet is not None:
        from segnet.training.nnunet_fine_tuning import carry_nnunet_source

        return carry_nnunet_source(cfg, given, plan, nnunet, same_scale)
    if plan is None or not source.plan:
        return plan
    if source.configuration != configuration_name(cfg.data):
        raise ConfigError(f"model.init_from={path} trained the {source.configuration} configuration but this run "
                          f"trains {configuration_name(cfg.data)}: its weights learnt another spacing. Fine-tune with "
                          f"data.configuration={source.configuration}")
    return apply_moved_plan(cfg.data, cfg.model, plan, source, str(path), same_scale)


def misfit(name: str, tensor: torch.Tensor, weights: dict[str, torch.Tensor]) -> str | None:
    """Why the checkpoint's `name` cannot start `tensor`, or None. A head's rows are its classes, so
    only its other axes must agree; a deep-supervision head the checkpoint lacks starts afresh."""
    if name not in weights:
        return None if name.startswith(HEADS) else "not there"
    first = 1 if name.startswith(HEADS) else 0
    if weights[name].shape[first:] == tensor.shape[first:]:
        return None
    return f"{tuple(weights[name].shape)} there, {tuple(tensor.shape)} here"


def class_rows(source: Sequence[str], target: Sequence[str]) -> dict[int, int]:
    """Each class of `target` that `source` also has: its row here, its row there."""
    return {row: list(source).index(name) for row, name in enumerate(target) if name in source}


def rows_by_class(saved: torch.Tensor, initialized: torch.Tensor, rows: dict[int, int]) -> torch.Tensor:
    """A head's tensor: the saved row of each class in `rows`, the others as initialized."""
    taken = initialized.clone()
    taken[list(rows)] = saved[list(rows.values())]
    return taken


def initialize_from(net: torch.nn.Module, path: str | Path, class_names: Sequence[str],
                    regions: Regions | None = None) -> list[str]:
    """Loads `path`'s weights into `net`, whose classes are `class_names` (and regions `regions`),
    the heads' rows by class or region name; returns the tensors left wholly as initialized
    (deep-supervision heads a checkpoint without them lacks)."""
    source, weights = source_run(Path(path), getattr(net, "edge_places", ()))
    source_regions = Regions.from_settings(source.regions)
    if (source_regions is None) != (regions is None):
        kinds = ("regions (a sigmoid each)", "classes (a softmax)")
        raise ConfigError(f"model.init_from={path} trained {kinds[source_regions is None]} but this run trains "
                          f"{kinds[regions is None]}: their heads mean different things; fine-tune between runs "
                          "of the same label kind")
    own = net.state_dict()
    misfits = [f"{name} ({problem})" for name, tensor in own.items() if (problem := misfit(name, tensor, weights))]
    if misfits:
        shown = misfits[:8] + ([f"and {len(misfits) - 8} more"] if len(misfits) > 8 else [])
        raise ConfigError(f"model.init_from={path} does not fit this network: " + "; ".join(shown)
                          + ". Fine-tune with the model settings the checkpoint was trained with (model.channels, "
                          "stem, strides, edge_placement, ...); only the classes may differ")
    outputs = output_names(class_names, regions)
    rows = class_rows(output_names(source.class_names, source_regions), outputs)
    fresh = [name for name in own if name not in weights]
    taken = {name: rows_by_class(weights[name], tensor, rows) if name.startswith(HEADS) else weights[name]
             for name, tensor in own.items() if name not in fresh}
    net.load_state_dict(taken, strict=not fresh)
    new = [name for row, name in enumerate(outputs) if row not in rows]
    log.info("model.init_from=%s: %d tensors loaded, the heads' rows by class name (%s)%s", path, len(taken),
             f"afresh: {', '.join(new)}" if new else "every class from the checkpoint",
             f", {len(fresh)} of the heads' initialized afresh ({', '.join(fresh)})" if fresh else "")
    return fresh
