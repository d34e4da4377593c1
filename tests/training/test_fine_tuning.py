"""Fine-tuning (model.init_from, segnet.training.fine_tuning): a new run starts from another run's
network weights and nothing else; the heads' rows follow the classes by name; a checkpoint that
does not fit stops the run with the tensors that do not. The run is planned with the source run's
orientation, spacing and normalization; other channels or another normalization scheme are refused
unless init_allow names them."""

from __future__ import annotations

import re

import pytest
import torch
from omegaconf import OmegaConf

from helpers.checkpoints import MODEL_3D, rename_in_dataset_json, run_data, write_checkpoint
from helpers.data import CLASS_NAMES, write_decathlon
from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config, tiny_overrides
from segnet.errors import ConfigError
from segnet.model.network import build_network
from segnet.training.fine_tuning import initialize_from
from segnet.training.run_config import run_config
from segnet.training.train import train

MODEL = {"spatial_dims": 2, "in_channels": 1, "out_channels": 3, "channels": [8, 16], "strides": [2],
         "num_res_units": 1, "norm": "instance", "act": "prelu", "dropout": 0.0, "edge_placement": ["input", "skips"],
         "edge_alpha_init": 0.1, "edge_alpha_trainable": True, "skip_layer": "edge", "init_from": None}


def saved_network(path, class_names=CLASS_NAMES, **changed) -> dict[str, torch.Tensor]:
    """A checkpoint holding a network of MODEL with `changed`, trained on `class_names`, as
    training saves it; its weights."""
    return write_checkpoint(path, {**MODEL, "out_channels": len(class_names), **changed},
                            run_data(class_names=class_names))


def test_every_tensor_comes_from_the_checkpoint(tmp_path):
    saved = saved_network(tmp_path / "run.ckpt")
    net = build_network(MODEL, "python")
    assert initialize_from(net, tmp_path / "run.ckpt", CLASS_NAMES) == []
    assert all(torch.equal(value, saved[name]) for name, value in net.state_dict().items())


def test_the_heads_rows_are_taken_by_class_name_and_new_classes_start_afresh(tmp_path):
    saved = saved_network(tmp_path / "run.ckpt", class_names=("background", "tube", "blob", "ring"))
    here = ("background", "blob", "cyst", "tube")  # tube and blob swapped, cyst new, ring left out
    torch.manual_seed(2)
    net = build_network({**MODEL, "out_channels": len(here)}, "python")
    fresh = {name: value.clone() for name, value in net.state_dict().items()}
    assert initialize_from(net, tmp_path / "run.ckpt", here) == []
    for name, value in net.state_dict().items():
        if name.startswith("head."):
            assert torch.equal(value[[0, 1, 3]], saved[name][[0, 2, 1]]), name  # background, blob, tube
            assert torch.equal(value[2], fresh[name][2]), name  # cyst
        else:
            assert torch.equal(value, saved[name]), name


def test_deep_supervision_heads_a_checkpoint_lacks_start_afresh(tmp_path):
    deeper = {"channels": [4, 8, 16, 32], "strides": [2, 2, 2]}
    saved = saved_network(tmp_path / "run.ckpt", **deeper)
    torch.manual_seed(2)
    net = build_network({**MODEL, **deeper, "deep_supervision": True}, "python")
    fresh = {name: value.clone() for name, value in net.state_dict().items()}
    left = initialize_from(net, tmp_path / "run.ckpt", CLASS_NAMES)
    assert left == ["supervision_heads.0.conv.weight", "supervision_heads.0.conv.bias"]
    for name, value in net.state_dict().items():
        assert torch.equal(value, fresh[name] if name in left else saved[name]), name


def test_a_checkpoint_of_another_network_is_refused_with_the_tensors_that_do_not_fit(tmp_path):
    saved_network(tmp_path / "wider.ckpt", channels=[8, 32])
    with pytest.raises(ConfigError, match=r"does not fit this network: .*\(\(32, 8, .*\) there, \(16, 8, .*\) here\)"):
        initialize_from(build_network(MODEL, "python"), tmp_path / "wider.ckpt", CLASS_NAMES)
    saved_network(tmp_path / "plain.ckpt", edge_placement=[])
    with pytest.raises(ConfigError, match=r"input_edge\.alpha \(not there\)"):
        initialize_from(build_network(MODEL, "python"), tmp_path / "plain.ckpt", CLASS_NAMES)
    torch.save({"epoch": 1}, tmp_path / "empty.ckpt")
    with pytest.raises(ConfigError, match="holds no network weights"):
        initialize_from(build_network(MODEL, "python"), tmp_path / "empty.ckpt", CLASS_NAMES)
    weights_alone = torch.load(tmp_path / "plain.ckpt", weights_only=True)["state_dict"]
    torch.save({"state_dict": weights_alone}, tmp_path / "bare.ckpt")  # no class names to match by
    with pytest.raises(ConfigError, match="lacks the data settings segnet's training saves"):
        initialize_from(build_network(MODEL, "python"), tmp_path / "bare.ckpt", CLASS_NAMES)


def planned(cfg):
    """A run's configuration as train() settles it, before anything is built or written."""
    return run_config(cfg).config


def tuning(root, output_dir, source=None, *overrides: str):
    """The configuration of a run on the dataset at `root`, fine-tuned from `source` if given;
    planned for a GPU, by the memory budget alone (counting each step's FLOPs takes seconds)."""
    return compose_config(["data=folder", f"data.root={root}", "data.num_folds=3", "data.num_workers=0", "op=python",
                           "data.plan_for=gpu", *([f"model.init_from={source}"] if source else []), *overrides,
                           *TINY_MODEL, *TINY_TRAINER], output_dir=output_dir)


# A run on CT scans planned on another grid: what the weights learnt, as its checkpoint records it.
CT = {"channel": "CT", "scheme": "ct", "mean": 40.0, "std": 12.0, "percentile_00_5": -100.0, "percentile_99_5": 300.0}
CT_RUN = run_data(channels=("CT",), spacing=(0.8, 1.2, 2.5), orientation="ASR", normalization=[CT])


def test_a_fine_tuned_run_is_planned_with_the_source_runs_grid_and_intensity_scale(tmp_path):
    source = tmp_path / "source.ckpt"
    write_checkpoint(source, MODEL_3D, CT_RUN)
    root = rename_in_dataset_json(write_decathlon(tmp_path / "Task", cases=3), channels=("CT",))
    own = planned(tuning(root, tmp_path / "own")).data
    tuned = planned(tuning(root, tmp_path / "tuned", source)).data
    assert (own.orientation, list(own.spacing)) == ("RAS", [1.0, 1.0, 1.0])  # the dataset's own plan
    assert own.normalization[0].mean != CT["mean"]  # its own CT statistics
    assert (tuned.orientation, list(tuned.spacing)) == ("ASR", [0.8, 1.2, 2.5])
    assert OmegaConf.to_container(tuned.normalization) == [CT]
    # its patch and batch are its own; the checkpoint and plans.json will say where the rest came from
    assert (list(tuned.patch_size), tuned.batch_size) == (list(own.patch_size), own.batch_size)
    assert tuned.plan.carried_from == str(source) and tuned.plan.configurations["3d"].spacing == [0.8, 1.2, 2.5]


def test_other_channels_or_normalization_are_refused_unless_allowed(tmp_path):
    source = tmp_path / "source.ckpt"
    write_checkpoint(source, MODEL_3D, CT_RUN)
    root = write_decathlon(tmp_path / "Task", cases=3)  # one MRI channel
    with pytest.raises(ConfigError, match=re.escape(
            f"channels ['MRI'] in {root}/dataset.json but ['CT'] in model.init_from={source} (")):
        planned(tuning(root, tmp_path / "a", source))
    with pytest.raises(ConfigError, match=re.escape(
            f"model.init_from={source}'s run normalized its channels as ['ct'] but this run normalizes them as "
            f"['zscore'] ({root}/dataset.json): ")):
        planned(tuning(root, tmp_path / "b", source, "init_allow=[channels]"))
    allowed = planned(tuning(root, tmp_path / "c", source, "init_allow=[channels,normalization]")).data
    own = [{"channel": "MRI", "scheme": "zscore", "nonzero": False}]
    assert OmegaConf.to_container(allowed.normalization) == own
    assert list(allowed.spacing) == [0.8, 1.2, 2.5]  # the grid is the source's all the same
    write_checkpoint(tmp_path / "t2.ckpt", MODEL_3D, run_data(channels=("T2",)))  # z-scored, as MRI is
    renamed = planned(tuning(root, tmp_path / "e", tmp_path / "t2.ckpt", "init_allow=[channels]")).data
    # the plan, and so the checkpoint, names this dataset's channel: evaluating on it is not refused
    assert OmegaConf.to_container(renamed.plan.normalization) == [{"channel": "MRI", "scheme": "zscore",
                                                                   "nonzero": True}]
    with pytest.raises(ConfigError, match=re.escape("init_allow=['spacing']: give any of channels, normalization")):
        planned(tuning(root, tmp_path / "d", source, "init_allow=[spacing]"))


@pytest.mark.slow
def test_a_fine_tuned_run_starts_from_the_weights_and_a_new_schedule(tmp_path):
    first = train(compose_config(tiny_overrides() + ["op=cpp"], output_dir=tmp_path / "first"))
    # At lr 0 nothing moves: the fine-tuned run ends with the weights it started from.
    tuned = train(compose_config(tiny_overrides() + ["op=cpp", f"model.init_from={first['checkpoints']['last']}",
                                                     "optim.lr=0"], output_dir=tmp_path / "tuned"))
    assert tuned["resumed_from"] is None and tuned["global_step"] == first["global_step"]  # a whole new fit
    start, end = (torch.load(path, weights_only=True)["state_dict"]
                  for path in (first["checkpoints"]["last"], tuned["checkpoints"]["last"]))
    assert all(torch.equal(end[name], start[name]) for name in start if name.startswith("net."))
