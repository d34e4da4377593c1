"""The plan a run trains with, and what segnet-plan does.

A run on a dataset folder takes its plan from, in order: `data.plan` (a plans.json that
segnet-plan or an earlier run wrote), the run folder's plans.json (a resumed run), or the
dataset's fingerprint. Every process of a job makes the same choice from the same files, so every
rank trains the same plan, the one the run folder's plans.json records (the first process writes
it). The fingerprint is also the integrity check, made once per dataset and kept
(segnet.planning.record), so a broken dataset stops every run before anything trains, a plan
passed in included. The plan then fills what the configuration leaves open (patch size, batch
size) and sets spacing, orientation and normalization; it is written to the run folder and,
through data.plan, into the checkpoint.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from segnet.cluster import is_first_process, trainer_uses_gpu
from segnet.data.cascade_input import previous_values
from segnet.data.dataset_json import DatasetDescription, describe_dataset
from segnet.data.headers import MAX_VOXELS
from segnet.data.regions import Regions
from segnet.errors import ConfigError
from segnet.files import write_json
from segnet.model.strides import total_strides
from segnet.planning.network_shape import network_shape
from segnet.planning.planner import CPU_STEP_GFLOPS, Budget, is_sized_by_plan, plan_dataset, volumes_per_step
from segnet.planning.record import dataset_fingerprint

log = logging.getLogger(__name__)
# The data section's keys that planning reads (conf/data/folder.yaml documents each).
PLANNING_KEYS = frozenset({"plan", "configuration", "max_voxels", "memory_budget_gb", "plan_for", "cpu_step_gflops",
                           "resample", "patch_scale", "batch_scale"})
ALIASES = {"3d_fullres": "3d"}  # nnU-Net's names of segnet's configurations
PLANS_FILE = "plans.json"
CONFIGURATION_KEYS = ("spacing", "patch_size", "batch_size", "samples_per_volume", "crops_per_step")


def fingerprint(description: DatasetDescription, cfg: DictConfig) -> dict[str, Any]:
    """The dataset's fingerprint (and integrity check), from its record where current."""
    return dataset_fingerprint(description, cfg.data.get("cache_dir"), max_voxels(cfg))


DEVICES = ("auto", "gpu", "cpu")


def planned_device(cfg: DictConfig) -> str:
    """data.plan_for: "gpu" or "cpu" as given; "auto": the trainer's device where there is a
    trainer (training), else a visible GPU (segnet-plan, segnet-preprocess)."""
    device = str(cfg.data.get("plan_for", "auto"))
    if device not in DEVICES:
        raise ConfigError(f"data.plan_for={device}; give one of {', '.join(DEVICES)}")
    if device != "auto":
        return device
    if cfg.get("trainer") is not None:
        return "gpu" if trainer_uses_gpu(cfg.trainer) else "cpu"
    return "gpu" if torch.cuda.is_available() else "cpu"


def plan_budget(cfg: DictConfig) -> Budget:
    """The memory budget on a GPU; on a CPU also the compute one (data.cpu_step_gflops)."""
    memory = float(cfg.data.memory_budget_gb)
    if planned_device(cfg) == "gpu":
        return Budget(memory)
    gflops = float(cfg.data.get("cpu_step_gflops", CPU_STEP_GFLOPS))
    if not (math.isfinite(gflops) and gflops > 0):
        raise ConfigError(f"data.cpu_step_gflops={gflops}; give the GFLOPs one training step may cost on the CPU "
                          f"(default {CPU_STEP_GFLOPS})")
    return Budget(memory, gflops)


def make_plan(description: DatasetDescription, cfg: DictConfig) -> dict[str, Any]:
    """The plan made from the fingerprint of the labelled cases, for the model and the device it
    trains on (and data.crop where it is set: the shapes of its boxes)."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    return plan_dataset(description, fingerprint(description, cfg), model, plan_budget(cfg),
                        int(cfg.data.samples_per_volume), cfg.data.get("crop"))


def max_voxels(cfg: DictConfig) -> int:
    """data.max_voxels: the most voxels a scan's header may claim before anything is read."""
    limit = cfg.data.get("max_voxels", MAX_VOXELS)
    if not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"data.max_voxels={limit}; give a positive number of voxels (default {MAX_VOXELS})")
    return limit


def read_plan(path: Path, description: DatasetDescription) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"data.plan={path} is not a file; pass a plans.json from segnet-plan or a run folder")
    try:
        plan = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path} is not valid JSON ({error}); pass a plans.json from segnet-plan") from None
    missing = [key for key in ("orientation", "normalization", "configurations") if key not in plan]
    configurations = plan.get("configurations", {})
    missing += [] if "2d" in configurations else ["configurations.2d"]  # a 2D dataset's plan has no 3d
    missing += [f"configurations.{c}.{key}" for c in configurations
                for key in CONFIGURATION_KEYS if key not in configurations[c]]
    if missing:
        raise ConfigError(f"{path} is not a segnet plan (it lacks {', '.join(missing)}); pass a plans.json from "
                          "segnet-plan, or leave data.plan out to plan afresh")
    if len(plan["normalization"]) != description.in_channels:
        raise ConfigError(
            f"{path} plans {len(plan['normalization'])} channel(s) but {description.root} has "
            f"{description.in_channels}: pass the plan of this dataset, or leave data.plan out to plan afresh"
        )
    return plan


def shown_spacing(spacing: Sequence[float] | None) -> str:
    """A spacing as the log shows it: a 2D plan's in-plane axes alone (its 0 along the slicing
    axis, which keeps each case's own spacing there, is no spacing to read)."""
    if spacing is None:
        return "as stored"
    values = [float(s) for s in spacing]
    return f"{values[:-1]} in plane" if values[-1] == 0 else str(values)


def write_plan(plan: dict[str, Any], path: Path) -> None:
    write_json(path, plan)


def scaled_patch(patch: list[int], scale: float, stride: Sequence[int]) -> list[int]:
    """The plan's patch times data.patch_scale per axis (the recipe ablation's smaller crops),
    rounded to the network's total stride per axis, at least one stride."""
    if not 0 < scale <= 1:
        raise ConfigError(f"data.patch_scale={scale}; give a share of the plan's patch in (0, 1]")
    return [max(k, k * round(p * scale / k)) for p, k in zip(patch, stride, strict=True)]


def configuration_name(data: DictConfig) -> str:
    """The plan's configuration a run trains: data.configuration, else that of data.spatial_dims."""
    given = data.get("configuration")
    return ALIASES.get(given, given) if given else f"{int(data.spatial_dims)}d"


def chosen_configuration(data: DictConfig, plan: dict[str, Any]) -> str:
    """The run's configuration, checked to be in the plan, with data.spatial_dims and
    data.configuration set to it (the checkpoint records which it trained)."""
    name = configuration_name(data)
    planned = plan["configurations"]
    if name == "3d" and name not in planned:
        raise ConfigError(f"{plan['dataset']} is a 2D dataset: its cases are one slice thick (median shape "
                          f"{plan['median_shape']}, slicing axis {plan['slicing_axis']}), so its plan has no 3d "
                          "configuration, as nnU-Net plans none; train it with data.spatial_dims=2")
    if name not in planned:
        why = f" ({planned['3d']['why']})" if name == "3d_lowres" and "why" in planned.get("3d", {}) else ""
        raise ConfigError(f"data.configuration={data.configuration}: the plan of {plan['dataset']} has "
                          f"{', '.join(planned)}{why}; train one of those")
    dims = 2 if name == "2d" else 3
    check_previous_stage(data, planned[name])
    if data.get("configuration") and int(data.spatial_dims) not in (dims, 3):
        raise ConfigError(f"data.configuration={data.configuration} is {dims}D but data.spatial_dims="
                          f"{data.spatial_dims}: give one of them")
    data.spatial_dims, data.configuration = dims, name
    return name


def check_previous_stage(data: DictConfig, configuration: dict[str, Any]) -> None:
    """A cascade names its first stage's runs (made absolute: the checkpoint keeps them); nothing
    else names any."""
    runs = data.get("previous_stage")
    stage = configuration.get("previous_stage")
    if stage and not runs:
        raise ConfigError(f"data.configuration={data.configuration} reads {stage}'s out-of-fold label maps: give its "
                          f"runs, one per fold, as data.previous_stage='[RUN_FOLD0,RUN_FOLD1,...]' (train {stage} "
                          "first, every fold)")
    if runs and not stage:
        raise ConfigError(f"data.previous_stage is read by a cascade only (data.configuration=3d_cascade_fullres), "
                          f"not by {configuration_name(data)}: leave it out")
    if runs:  # in one order, so that every fold of a cascade names the same first stage
        runs = [runs] if isinstance(runs, str) else runs
        data.previous_stage = sorted(str(Path(run).resolve()) for run in runs)


def input_channels(data: DictConfig) -> int:
    """The network's input channels: the images', and a cascade's one per foreground label."""
    if not data.get("previous_stage"):
        return int(data.in_channels)
    settings = data.get("regions")  # dataset.json's, through a resolver: a plain dict, or a config where set
    regions = Regions.from_settings(OmegaConf.to_container(settings) if OmegaConf.is_config(settings) else settings)
    return int(data.in_channels) + len(previous_values(int(data.num_classes), regions))


def apply_plan(data: DictConfig, model: DictConfig, plan: dict[str, Any]) -> None:
    """What the plan decides for this run's data section (values the user set win): the patch and
    batch it planned for its model, which a model sized by the plan trains with the network the
    plan proposes (size_network)."""
    name = chosen_configuration(data, plan)
    configuration = plan["configurations"][name]
    dims = int(data.spatial_dims)
    if data.get("previous_stage"):
        model.in_channels = input_channels(data)
    if data.patch_size is None:
        strides = OmegaConf.to_container(model, resolve=True)["strides"]
        if strides is None:
            strides = configuration.get("network", {}).get("strides")
        stride = total_strides(strides, dims) if strides is not None else (1,) * dims
        data.patch_size = scaled_patch(configuration["patch_size"], float(data.get("patch_scale", 1.0)), stride)
    if data.batch_size is None:
        batch_scale = float(data.get("batch_scale", 1.0))
        if not (math.isfinite(batch_scale) and batch_scale > 0):
            raise ConfigError(f"data.batch_scale={batch_scale}; give a positive factor of the plan's batch "
                              "(0.25 for a quarter), or set data.batch_size")
        # The crops the budget fits, over this run's crops per volume (the plan's batch_size where
        # they are the plan's).
        crops = max(1, round(configuration["crops_per_step"] * batch_scale))
        data.batch_size = volumes_per_step(crops, int(data.samples_per_volume))
    data.orientation = plan["orientation"]
    if data.get("crop") is None:
        data.crop = plan.get("crop", "none")  # a plan made before crops were planned: the whole volume
    data.spacing = configuration["spacing"] if data.resample else None
    if data.normalization is None:
        data.normalization = plan["normalization"]
    # Into the checkpoint: everything but the per-case fingerprint, which stays in plans.json.
    data.plan = {key: value for key, value in plan.items() if key != "fingerprint"}


def size_network(model: DictConfig, data: DictConfig) -> None:
    """A model that leaves channels or strides open (model=resenc) gets them by nnU-Net's rule for
    the patch this run trains, at the plan's spacing (generated data: 1 mm); values set win."""
    if not is_sized_by_plan(OmegaConf.to_container(model, resolve=True)):
        return
    dims = int(data.spatial_dims)
    patch = data.patch_size
    plan = data.get("plan")
    spacing = plan["configurations"][configuration_name(data)]["spacing"][:dims] if plan else [1.0] * dims
    shape = network_shape(spacing, list(patch)[:dims])
    if model.channels is None:
        model.channels = shape.channels
    if model.strides is None:
        model.strides = shape.strides
    log.info("network sized for patch %s: channels %s, strides %s", list(patch)[:dims], list(model.channels),
             OmegaConf.to_container(model.strides))


def plan_for_run(cfg: DictConfig, output_dir: Path) -> dict[str, Any] | None:
    """The plan of a run on a dataset folder (None for generated data), applied to cfg.data;
    record_plan then writes it into the run folder."""
    data = cfg.data
    if "root" not in data:
        return None
    description = describe_dataset(str(data.root))
    plan = choose_plan(cfg, description, output_dir / PLANS_FILE)
    apply_plan(data, cfg.model, plan)
    log.info("plan: %s orientation, crop to the %s box, spacing %s, patch %s, batch %s volume(s) x %s crop(s)",
             plan["orientation"], data.crop, shown_spacing(data.spacing),
             list(data.patch_size), data.batch_size, data.samples_per_volume)
    return plan


def record_plan(plan: dict[str, Any] | None, output_dir: Path) -> None:
    """The run folder's plans.json: the plan this run trains (written by the first process)."""
    in_run_folder = output_dir / PLANS_FILE
    if plan is None or not is_first_process():
        return
    if not (in_run_folder.is_file() and json.loads(in_run_folder.read_text()) == plan):
        write_plan(plan, in_run_folder)


def choose_plan(cfg: DictConfig, description: DatasetDescription, in_run_folder: Path) -> dict[str, Any]:
    """data.plan, else the run folder's (a resumed run), else a plan of the fingerprint, with the
    dataset checked first in every case. Every process chooses the same: data.plan and the
    fingerprint are the same files for all, and the run folder's plans.json is either the one
    the job started with or the first process's copy of the same choice."""
    given = cfg.data.get("plan")
    if OmegaConf.is_dict(given):  # a configuration that already carries its plan
        return OmegaConf.to_container(given, resolve=True)
    if given:
        plan = read_plan(Path(str(given)), description)
        fingerprint(description, cfg)
        return plan
    if in_run_folder.is_file():
        log.info("plan: %s (this run's)", in_run_folder)
        fingerprint(description, cfg)
        return read_plan(in_run_folder, description)
    return json.loads(json.dumps(make_plan(description, cfg)))  # as plans.json will hold it


def plan_command(cfg: DictConfig) -> dict[str, Any] | None:
    """segnet-plan: verify the dataset, and unless verify=true, write its plan."""
    if OmegaConf.is_missing(cfg.data, "root"):
        raise ConfigError("data.root is required: segnet-plan data.root=/data/Dataset001_Name")
    description = describe_dataset(str(cfg.data.root))
    if cfg.verify:
        fingerprint(description, cfg)
        log.info("%s: %d case(s), no problems found", description.root, len(description.labelled))
        return None
    plan = make_plan(description, cfg)
    write_plan(plan, Path(cfg.output))
    log.info("crop: to the %s box (%s)", plan["crop"], plan["crop_why"])
    for name, configuration in plan["configurations"].items():
        network = configuration.get("network")
        log.info("%s: spacing %s, patch %s, batch %d volume(s) x %d crop(s); %s", name,
                 shown_spacing(configuration["spacing"]),
                 configuration["patch_size"], configuration["batch_size"], configuration["samples_per_volume"],
                 f"the network: channels {network['channels']}, strides {network['strides']}" if network
                 else "the model's own network")
    log.info("plan in %s; train with data.plan=%s", cfg.output, cfg.output)
    return plan
