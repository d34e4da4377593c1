"""The network sized by the plan (segnet.planning.network_shape): nnU-Net's own planner gives the same
stages, strides and padded patch; a plan for a model that leaves channels or strides open
proposes it, with that network's patch and batch (the configuration's only ones), and the model
trains it, values set win; model=resenc trains."""

from __future__ import annotations

import json
import math

import pytest
import torch
from omegaconf import OmegaConf

from helpers.data import write_decathlon
from helpers.training import TINY_2D, TINY_TRAINER, compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.model.strides import total_strides
from segnet.planning.network_shape import BASE_FEATURES, MAX_FEATURES, MIN_EDGE, network_shape
from segnet.planning.plan import apply_plan, make_plan, size_network
from segnet.planning.planner import Budget, Dataset, sized_network
from segnet.training.train import train

# The peer (the extra `peer`, which `make test` installs); a machine without it, such as a GPU
# machine running `pytest -m cuda`, skips this module instead of failing the whole collection.
get_pool_and_conv_props = pytest.importorskip(
    "nnunetv2.experiment_planning.experiment_planners.network_topology").get_pool_and_conv_props

NNUNET_MIN_EDGE, NNUNET_BASE, NNUNET_MAX = 4, 32, {2: 512, 3: 320}  # nnU-Net v2's ExperimentPlanner


@pytest.mark.parametrize("spacing, patch", [
    ((0.8, 0.8), (256, 224)),  # 2D: down to 4 x 7 after six levels, features capped at 512
    ((3.0, 0.8, 0.8), (40, 192, 160)),  # thick slices: the coarse axis pooled only once it is within 2x
    ((1.0, 1.0, 1.0), (7, 9, 200)),  # a lone long axis, and padding to the stride (9 -> 10, 200 -> 224)
])
def test_the_stages_are_nnunets(spacing, patch):
    assert (MIN_EDGE, BASE_FEATURES, MAX_FEATURES) == (NNUNET_MIN_EDGE, NNUNET_BASE, NNUNET_MAX)
    _, pools, _, padded, divisor = get_pool_and_conv_props(spacing, patch, NNUNET_MIN_EDGE, 999999)
    shape = network_shape(spacing, patch)
    assert shape.strides == [list(level) for level in pools[1:]]  # nnU-Net's first "pool" is the stem's 1s
    assert shape.patch_size == [int(p) for p in padded]
    features = [min(NNUNET_MAX[len(patch)], NNUNET_BASE * 2**stage) for stage in range(len(pools))]
    assert shape.channels == features
    assert list(total_strides(shape.strides, len(patch))) == [int(d) for d in divisor]


def test_a_patch_that_must_shrink_gets_the_network_shape_of_the_patch_it_trains():
    model = {"num_res_units": 1, "norm": "instance", "act": "prelu", "dropout": 0.0, "edge_placement": ["input"],
             "edge_alpha_init": 0.1}
    dataset = Dataset(in_channels=1, num_classes=2, voxels=1e9)
    roomy = sized_network(model, [64, 64], [1.0, 1.0], Budget(1.0), dataset)
    assert roomy["patch_size"] == [64, 64] and roomy["channels"] == [32, 64, 128, 256, 512]
    two_crops_of_16 = 2 * 16 * 16 * roomy["saved_bytes_per_voxel"] / 2**30
    tight = sized_network(model, [64, 64], [1.0, 1.0], Budget(two_crops_of_16), dataset)
    assert tight["patch_size"] == [16, 16] and tight["strides"] == [[2, 2], [2, 2]]  # 16 -> 4: two levels
    assert tight["batch_size"] == 2


def plan_with(**configuration) -> dict:
    return {"configurations": {"2d": {"spacing": [1.0, 2.0, 0.0], "samples_per_volume": 2, **configuration}},
            "orientation": "RAS", "normalization": []}


def data_section(**given) -> OmegaConf:
    return OmegaConf.create({"spatial_dims": 2, "patch_size": None, "batch_size": None, "samples_per_volume": 2,
                             "resample": True, "normalization": None, "plan": None, **given})


def test_a_model_sized_by_the_plan_trains_the_proposed_network_and_values_set_win():
    proposal = {"channels": [32, 64, 128], "strides": [[2, 1], [2, 2]]}
    plan = plan_with(patch_size=[64, 40], batch_size=3, crops_per_step=6, network=proposal)
    sized = OmegaConf.create({"channels": None, "strides": None})
    data = data_section()
    apply_plan(data, sized, plan)
    assert list(data.patch_size) == [64, 40] and data.batch_size == 3  # 6 crops, 2 per volume
    size_network(sized, data)
    # nnU-Net's rule for [64, 40] at 1 x 2 mm: the finer axis alone first, then both
    assert list(sized.channels) == [32, 64, 128, 256, 512] and OmegaConf.to_container(sized.strides) == [
        [2, 1], [2, 2], [2, 2], [2, 2]]
    data = data_section(samples_per_volume=4)
    apply_plan(data, OmegaConf.create({"channels": None, "strides": None}), plan)
    assert data.batch_size == 2  # the budget's 6 crops, 4 per volume: 2 volumes, not the plan's 3
    fixed = OmegaConf.create({"channels": [8, 16, 32], "strides": [2, 2]})
    data = data_section()
    apply_plan(data, fixed, plan_with(patch_size=[96, 80], batch_size=8, crops_per_step=16))
    assert list(data.patch_size) == [96, 80] and data.batch_size == 8
    size_network(fixed, data)
    assert list(fixed.channels) == [8, 16, 32]  # a fixed network stays as it is
    own = OmegaConf.create({"channels": [16, 32, 64], "strides": None})
    data = data_section(patch_size=[32, 32])
    apply_plan(data, own, plan)
    size_network(own, data)
    assert list(own.channels) == [16, 32, 64] and len(own.strides) == 3  # channels set, strides for 32 x 32


@pytest.mark.parametrize("model, proposes", [(["model.channels=[8,16]", "model.strides=[2]"], False),
                                             (["model=resenc"], True)])
def test_each_configuration_has_one_patch_and_batch_and_a_network_where_the_plan_sizes_it(tmp_path, model, proposes):
    root = write_decathlon(tmp_path / "Task", cases=3)
    overrides = ["data=folder", f"data.root={root}", *model]
    plan = make_plan(describe_dataset(str(root)), compose_config(overrides, output_dir=tmp_path / "plan"))
    for dims in (2, 3):
        configuration = plan["configurations"][f"{dims}d"]
        assert configuration["batch_size"] == math.ceil(configuration["crops_per_step"] / 2)  # volumes, 2 crops each
        assert configuration["samples_per_volume"] == 2 and len(configuration["patch_size"]) == dims
        assert ("network" in configuration) == proposes
        if proposes:
            network, spacing = configuration["network"], configuration["spacing"][:dims]
            assert network_shape(spacing, configuration["patch_size"]).strides == network["strides"]
            assert configuration["crops_per_step"] >= 2 and network["channels"][0] == 32
    json.dumps(plan)  # as plans.json holds it


def test_resenc_trains_a_sized_deeper_encoder_with_deep_supervision(tmp_path):
    metrics = train(compose_config([*TINY_2D, *TINY_TRAINER, "model=resenc", "op=cpp"], output_dir=tmp_path))
    saved = torch.load(metrics["checkpoints"]["last"], weights_only=True)
    model = saved["hyper_parameters"]["model"]
    assert model["channels"] == [32, 64, 128, 256] and model["strides"] == [[2, 2]] * 3  # 32 -> 4 at the bottleneck
    units = {name.split(".")[3] for name in saved["state_dict"] if name.startswith("net.more_blocks.1.")}
    assert len(units) == 2  # level 1 has 3 units: the strided one and two more
    assert any(name.startswith("net.supervision_heads.0.") for name in saved["state_dict"])
    assert metrics["global_step"] > 0
