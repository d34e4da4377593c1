"""Deep supervision (model.deep_supervision): the network's extra outputs, the loss's weights and
downsampled labels, checked by hand on tiny cases; eval mode and the export return the full
resolution alone."""

from __future__ import annotations

import pytest
import torch

from segnet.inference.trained_model import TrainedModel
from segnet.model.dice_ce import SegmentationLoss, dice_ce_loss, supervision_weights
from segnet.model.network import EdgeUNet


def network(levels: int, backend: str = "python") -> EdgeUNet:
    torch.manual_seed(0)
    channels = [4 * 2**i for i in range(levels)]
    return EdgeUNet(2, 1, 3, channels, [2] * (levels - 1), edge_backend=backend, deep_supervision=True)


def test_weights_halve_per_level_and_sum_to_one():
    assert supervision_weights(1) == [1.0]
    assert supervision_weights(2) == pytest.approx([2 / 3, 1 / 3])
    assert supervision_weights(3) == pytest.approx([4 / 7, 2 / 7, 1 / 7])


@pytest.mark.parametrize("ignore_label", [None, 2])
def test_the_loss_is_the_weighted_sum_over_levels_with_the_label_downsampled_by_nearest(ignore_label):
    generator = torch.Generator().manual_seed(0)
    label = torch.randint(0, 3, (2, 1, 8, 8), generator=generator)
    full, half, quarter = (torch.randn(2, 3, s, s, generator=generator) for s in (8, 4, 2))
    plain = SegmentationLoss(ignore_label)
    # nearest-exact takes the voxel under each coarse voxel's centre: 2i + 1 at 1/2, 4i + 2 at 1/4
    by_hand = (4 * plain(full, label) + 2 * plain(half, label[..., 1::2, 1::2])
               + plain(quarter, label[..., 2::4, 2::4])) / 7
    loss = dice_ce_loss(ignore_label, 3)([full, half, quarter], label.float())
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-6)
    # one level is the plain loss, whatever the label's dtype
    assert dice_ce_loss(ignore_label)(full, label.float()).item() == pytest.approx(plain(full, label).item(),
                                                                                    rel=1e-6)


def test_training_returns_every_level_but_the_coarsest_and_eval_the_full_resolution_alone():
    net = network(levels=5)  # the decoder at 1, 1/2, 1/4, 1/8; the bottleneck at 1/16
    assert len(net.supervision_heads) == 2  # 1/2 and 1/4; 1/8 is left out, as nnU-Net leaves it
    x = torch.randn(2, 1, 27, 20)  # padded to 32 x 32 inside, cropped back per level
    outputs = net.train()(x)
    assert [tuple(o.shape) for o in outputs] == [(2, 3, 27, 20), (2, 3, 14, 10), (2, 3, 7, 5)]
    full = net.eval()(x)
    assert isinstance(full, torch.Tensor)
    torch.testing.assert_close(full, outputs[0])  # instance norm, no dropout: the same in both modes
    # two levels have nothing to supervise but the full resolution
    assert len(network(levels=2).supervision_heads) == 0
    assert isinstance(network(levels=2).train()(x), torch.Tensor)


def test_anisotropic_strides_give_per_axis_levels():
    torch.manual_seed(0)
    net = EdgeUNet(3, 1, 2, [4, 8, 16, 32], [[1, 2, 2], 2, 2], edge_backend="python", deep_supervision=True)
    assert net.downsampling == (4, 8, 8)
    outputs = net.train()(torch.randn(1, 1, 5, 12, 9))
    assert [tuple(o.shape[2:]) for o in outputs] == [(5, 12, 9), (5, 6, 5)]


def test_the_gradient_reaches_every_supervision_head():
    net = network(levels=5).train()
    label = torch.randint(0, 3, (2, 1, 32, 32)).float()
    dice_ce_loss(None, 3)(net(torch.randn(2, 1, 32, 32)), label).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.supervision_heads.parameters())


def test_the_export_returns_the_full_resolution_alone(tmp_path):
    from segnet.export.exporter import export_network

    net = network(levels=3, backend="cpp")  # an export calls the fused op
    data = {"spatial_dims": 2, "in_channels": 1, "class_names": ["background", "a", "b"]}
    model = TrainedModel(net, data, {}, torch.device("cpu"), backend="cpp")
    export_network(model, tmp_path / "model.pt2", "exported_program")
    program = torch.export.load(str(tmp_path / "model.pt2")).module()
    x = torch.randn(1, 1, 16, 24)
    with torch.no_grad():
        exported = program(x)
        torch.testing.assert_close(exported, net(x))
    assert isinstance(exported, torch.Tensor)
