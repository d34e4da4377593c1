"""Edge layers inserted into a trained nnU-Net network with alpha 0 (segnet.nnunet.edges)."""

from __future__ import annotations

import copy

import pytest
import torch

from ops import EdgeEnhance
from segnet.errors import ConfigError


def test_edge_layers_inserted_with_alpha_zero_leave_the_first_forward_pass_as_it_was(nnunet_model):
    from segnet.inference.nnunet_model import load_nnunet
    from segnet.nnunet.edges import insert_edge_layers

    source = load_nnunet(nnunet_model.checkpoint, torch.device("cpu")).net
    edged = copy.deepcopy(source)
    insert_edge_layers(edged, ["input", "skips"], in_channels=1, backend="python")
    layers = [module for module in edged.modules() if isinstance(module, EdgeEnhance)]
    assert len(layers) == 1 + len(source.network.encoder.stages)
    assert all(layer.alpha.requires_grad and not layer.alpha.any() for layer in layers)
    image = torch.randn(2, 1, 28, 24, 18, generator=torch.Generator().manual_seed(0)) * 3
    with torch.no_grad():
        expected, got = source(image), edged(image)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    with torch.no_grad():  # and they are there: an alpha changes what the network computes
        layers[1].alpha.fill_(0.5)
        assert (edged(image) - expected).abs().max() > 1e-3


def test_an_unknown_place_is_refused(nnunet_model):
    from segnet.inference.nnunet_model import load_nnunet
    from segnet.nnunet.edges import insert_edge_layers

    net = load_nnunet(nnunet_model.checkpoint, torch.device("cpu")).net
    with pytest.raises(ConfigError, match="names bottleneck; nnU-Net's networks take edge layers at input, skips"):
        insert_edge_layers(net, ["bottleneck"], in_channels=1)


def test_the_places_are_edgeunets():
    from segnet.model.network import PLACEMENTS
    from segnet.nnunet.edges import PLACES

    assert PLACES == PLACEMENTS  # one meaning of model.edge_placement for both networks
