"""Fine-tuning (model.init_from, segnet.training.fine_tuning): a new run starts from another run's
network weights and nothing else; the head starts afresh for other classes; a checkpoint that does
not fit stops the run with the tensors that do not."""

from __future__ import annotations

import pytest
import torch

from helpers.training import compose_config, tiny_overrides
from segnet.errors import ConfigError
from segnet.model.network import build_network
from segnet.training.api import train
from segnet.training.fine_tuning import initialize_from

MODEL = {"spatial_dims": 2, "in_channels": 1, "out_channels": 3, "channels": [8, 16], "strides": [2],
         "num_res_units": 1, "norm": "instance", "act": "prelu", "dropout": 0.0, "edge_placement": ["input", "skips"],
         "edge_alpha_init": 0.1, "edge_alpha_trainable": True, "skip_layer": "edge", "init_from": None}


def saved_network(path, **changed) -> dict[str, torch.Tensor]:
    """A checkpoint holding a network of MODEL with `changed`, as training saves it; its weights."""
    torch.manual_seed(1)
    state = build_network({**MODEL, **changed}, "python").state_dict()
    torch.save({"state_dict": {f"net.{name}": value for name, value in state.items()}, "epoch": 3}, path)
    return state


def test_every_tensor_comes_from_the_checkpoint(tmp_path):
    saved = saved_network(tmp_path / "run.ckpt")
    net = build_network(MODEL, "python")
    assert initialize_from(net, tmp_path / "run.ckpt") == []
    assert all(torch.equal(value, saved[name]) for name, value in net.state_dict().items())


def test_other_classes_start_with_a_fresh_head_and_the_rest_from_the_checkpoint(tmp_path):
    saved = saved_network(tmp_path / "run.ckpt", out_channels=5)
    torch.manual_seed(2)
    net = build_network(MODEL, "python")
    fresh = {name: value.clone() for name, value in net.state_dict().items()}
    left = initialize_from(net, tmp_path / "run.ckpt")
    assert left and all(name.startswith("head.") for name in left)
    for name, value in net.state_dict().items():
        assert torch.equal(value, fresh[name] if name in left else saved[name]), name


def test_deep_supervision_heads_a_checkpoint_lacks_start_afresh(tmp_path):
    deeper = {"channels": [4, 8, 16, 32], "strides": [2, 2, 2]}
    saved = saved_network(tmp_path / "run.ckpt", **deeper)
    torch.manual_seed(2)
    net = build_network({**MODEL, **deeper, "deep_supervision": True}, "python")
    fresh = {name: value.clone() for name, value in net.state_dict().items()}
    left = initialize_from(net, tmp_path / "run.ckpt")
    assert left == ["supervision_heads.0.conv.weight", "supervision_heads.0.conv.bias"]
    for name, value in net.state_dict().items():
        assert torch.equal(value, fresh[name] if name in left else saved[name]), name


def test_a_checkpoint_of_another_network_is_refused_with_the_tensors_that_do_not_fit(tmp_path):
    saved_network(tmp_path / "wider.ckpt", channels=[8, 32])
    with pytest.raises(ConfigError, match=r"does not fit this network: .*\(\(32, 8, .*\) there, \(16, 8, .*\) here\)"):
        initialize_from(build_network(MODEL, "python"), tmp_path / "wider.ckpt")
    saved_network(tmp_path / "plain.ckpt", edge_placement=[])
    with pytest.raises(ConfigError, match=r"input_edge\.alpha \(not there\)"):
        initialize_from(build_network(MODEL, "python"), tmp_path / "plain.ckpt")
    torch.save({"epoch": 1}, tmp_path / "empty.ckpt")
    with pytest.raises(ConfigError, match="holds no network weights"):
        initialize_from(build_network(MODEL, "python"), tmp_path / "empty.ckpt")


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
