"""A plan for the device that trains: a GPU's memory budget alone, a CPU's also a compute budget
per step (counted FLOPs), stated in plans.json; the CPU default is make train's step."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from helpers.training import compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.errors import ConfigError
from segnet.generated.phantom import write_phantom_dataset
from segnet.planning.plan import plan_budget, planned_device
from segnet.planning.planner import CPU_STEP_GFLOPS, Budget, plan_dataset, step_flops_per_voxel
from segnet.planning.record import dataset_fingerprint

MODEL = {"channels": [8, 16, 32], "strides": [2, 2], "num_res_units": 1, "norm": "instance", "act": "prelu",
         "dropout": 0.0, "edge_placement": ["input", "skips"], "edge_alpha_init": 0.1}
CROPS_PER_VOLUME = 2  # conf/data/folder.yaml's samples_per_volume
GRIDS = [((1.0, 1.0, 1.0), "RAS")] * 3


def test_the_cpu_budget_is_make_trains_step():
    cfg = compose_config([])  # make train: python train.py
    model = OmegaConf.to_container(cfg.model, resolve=True)
    flops = step_flops_per_voxel(model, 2, cfg.data.in_channels, cfg.data.num_classes)
    step = flops * cfg.data.batch_size * math.prod(cfg.data.patch_size) / 1e9
    assert step == pytest.approx(CPU_STEP_GFLOPS, rel=0.01)
    assert compose_config(["data=folder", "data.root=/x"]).data.cpu_step_gflops == CPU_STEP_GFLOPS


def test_a_cpu_plan_fits_a_steps_flops_and_a_gpu_plan_memory_alone(tmp_path):
    description = describe_dataset(str(write_phantom_dataset(tmp_path / "Phantom", GRIDS)))
    fingerprint = dataset_fingerprint(description)
    gpu = plan_dataset(description, fingerprint, MODEL, Budget(8.0), CROPS_PER_VOLUME)
    cpu = plan_dataset(description, fingerprint, MODEL, Budget(8.0, step_gflops=0.2), CROPS_PER_VOLUME)
    sized = plan_dataset(description, fingerprint, {**MODEL, "channels": None, "strides": None},
                         Budget(8.0, step_gflops=0.2), CROPS_PER_VOLUME)
    assert gpu["budget"] == {"device": "gpu", "memory_gb": 8.0, "step_gflops": None}
    assert cpu["budget"] == {"device": "cpu", "memory_gb": 8.0, "step_gflops": 0.2}
    for dims in ("2d", "3d"):
        on_cpu, on_gpu = cpu["configurations"][dims], gpu["configurations"][dims]
        step = on_cpu["step_flops_per_voxel"] * math.prod(on_cpu["patch_size"]) * on_cpu["crops_per_step"]
        assert step <= 0.2e9 or on_cpu["crops_per_step"] == 2 and min(on_cpu["patch_size"]) == 4  # as small as it goes
        assert math.prod(on_cpu["patch_size"]) * on_cpu["crops_per_step"] < math.prod(on_gpu["patch_size"]) * on_gpu[
            "crops_per_step"]  # the budget binds here
        assert "step_flops_per_voxel" not in on_gpu
        proposed = sized["configurations"][dims]  # the sized network fits the same budget
        sized_step = proposed["step_flops_per_voxel"] * math.prod(proposed["patch_size"]) * proposed["crops_per_step"]
        assert "network" in proposed and (sized_step <= 0.2e9 or proposed["crops_per_step"] == 2)


def test_the_device_is_the_trainers_unless_given(monkeypatch):
    folder = ["data=folder", "data.root=/x"]
    assert planned_device(compose_config([*folder, "trainer=cpu"])) == "cpu"
    assert planned_device(compose_config([*folder, "trainer=cpu", "data.plan_for=gpu"])) == "gpu"
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert planned_device(compose_config([*folder, "trainer.accelerator=auto"])) == "gpu"
    assert planned_device(compose_config([*folder, "trainer=cpu"])) == "cpu"  # a GPU in sight, a CPU trainer
    assert planned_device(compose_config(folder, name="plan")) == "gpu"  # no trainer: a visible GPU
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert planned_device(compose_config(folder, name="plan")) == "cpu"
    assert plan_budget(compose_config(folder, name="plan")) == Budget(8.0, CPU_STEP_GFLOPS)
    with pytest.raises(ConfigError, match="data.plan_for=tpu; give one of auto, gpu, cpu"):
        planned_device(compose_config([*folder, "data.plan_for=tpu"]))
    with pytest.raises(ConfigError, match="data.cpu_step_gflops=0.0"):
        plan_budget(compose_config([*folder, "trainer=cpu", "data.cpu_step_gflops=0"]))
