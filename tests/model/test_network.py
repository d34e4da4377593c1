"""EdgeUNet: shapes, edge placement, backends and torch.compile of the whole network."""

from __future__ import annotations

import pytest
import torch

import ops
from segnet.model.network import EdgeUNet
from segnet.model.sharpening import FixedSharpening

pytestmark = pytest.mark.usefixtures("cpu_library")


def small_net(spatial_dims=2, backend="cpp", placement=("input", "skips")):
    return EdgeUNet(spatial_dims, 2, 3, channels=(8, 16, 32), strides=(2, 2), edge_placement=placement,
                    edge_alpha_init=0.5, edge_backend=backend)


@pytest.mark.parametrize("shape", [(2, 2, 32, 32), (1, 2, 35, 51), (1, 2, 17, 20, 9)])
def test_output_has_the_input_size_and_one_channel_per_class(shape):
    net = small_net(spatial_dims=len(shape) - 2)
    assert net(torch.randn(shape)).shape == (shape[0], 3, *shape[2:])


@pytest.mark.parametrize(
    "placement,expected_channels",
    [(("input", "skips"), [2, 8, 16]), (("input",), [2]), (("skips",), [8, 16]), ((), [])],
)
def test_edge_layers_sit_where_the_config_says(placement, expected_channels):
    net = small_net(placement=placement)
    assert [layer.alpha.numel() for layer in net.edge_layers()] == expected_channels


def test_python_and_cpp_backends_give_the_same_network_output():
    torch.manual_seed(0)
    net_cpp = small_net(backend="cpp")
    net_py = small_net(backend="python")
    net_py.load_state_dict(net_cpp.state_dict())
    x = torch.randn(2, 2, 24, 40)
    assert torch.allclose(net_cpp(x), net_py(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_whole_network_compiles_without_graph_breaks(backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = small_net(backend=backend)
    options = ops.INDUCTOR_OPTIONS if backend == "python" else None
    compiled = torch.compile(net, fullgraph=True, options=options)
    x = torch.randn(2, 2, 32, 32)
    eager_out = net(x)
    eager_out.square().mean().backward()
    eager_grad = net.input_edge.alpha.grad.clone()
    net.zero_grad()
    out = compiled(x)
    out.square().mean().backward()
    assert torch.allclose(out, eager_out, rtol=1e-4, atol=1e-5)
    assert torch.allclose(net.input_edge.alpha.grad, eager_grad, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_the_conv_stem_makes_the_network_blind_to_its_inputs_intensity_scale_and_offset(spatial_dims):
    # per-volume z-scores put the same anatomy at another scale and offset when more air surrounds it
    torch.manual_seed(0)
    x = torch.randn(1, 2, *([20] * spatial_dims))
    conv = EdgeUNet(spatial_dims, 2, 3, channels=(8, 16, 32), strides=(2, 2), stem="conv", edge_backend="cpp").eval()
    residual = small_net(spatial_dims).eval()  # the default stem, MONAI's residual unit
    with torch.no_grad():
        assert torch.allclose(conv(3.7 * x - 2.0), conv(x), atol=1e-4)
        assert (residual(3.7 * x - 2.0) - residual(x)).abs().max() > 0.05  # it passes the input on


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="len\\(strides\\) == len\\(channels\\) - 1"):
        EdgeUNet(2, 1, 2, channels=(8, 16), strides=(2, 2))
    with pytest.raises(ValueError, match="spatial_dims must be 2 or 3"):
        EdgeUNet(1, 1, 2)
    with pytest.raises(ValueError, match="subset of \\['input', 'skips'\\]"):
        EdgeUNet(2, 1, 2, edge_placement=["decoder"])
    with pytest.raises(ValueError, match="one per axis \\(2 of them\\), got strides=\\[2, \\[1, 2, 2\\]\\]"):
        EdgeUNet(2, 1, 2, channels=(8, 16, 32), strides=[2, [1, 2, 2]])
    with pytest.raises(ValueError, match="encoder_blocks needs a positive count for each of the 3 levels"):
        EdgeUNet(2, 1, 2, channels=(8, 16, 32), strides=(2, 2), encoder_blocks=[1, 2])
    with pytest.raises(ValueError, match="stem must be one of \\['conv', 'residual'\\], got 'plain'"):
        EdgeUNet(2, 1, 2, stem="plain")


@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_sharp_unet_skips_keep_flat_regions_and_steepen_steps(spatial_dims):
    sharpen = FixedSharpening(2, spatial_dims)
    assert not list(sharpen.parameters()) and "weight" in sharpen.state_dict()  # fixed, yet saved and exported
    flat = torch.full((1, 2, *[6] * spatial_dims), 3.0)
    assert torch.allclose(sharpen(flat), flat)
    step = torch.zeros(1, 2, *[6] * spatial_dims)
    step[:, :, 3:] = 1.0
    out = sharpen(step)
    edge = 3 ** (spatial_dims - 1)  # the taps across the step: the neighbour plane's count
    assert torch.allclose(out[:, :, 2], torch.full_like(out[:, :, 2], -float(edge)))  # undershoot before the step
    assert torch.allclose(out[:, :, 3], torch.full_like(out[:, :, 3], 1.0 + edge))  # overshoot after it
    assert torch.allclose(out[:, :, 0], step[:, :, 0]) and torch.allclose(out[:, :, 5], step[:, :, 5])


@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_the_ablation_baselines_are_the_same_network_with_another_skip_layer_or_frozen_gains(spatial_dims):
    sharp = EdgeUNet(spatial_dims, 1, 2, channels=(4, 8, 16), strides=(2, 2), edge_placement=["skips"],
                     skip_layer="sharpen", edge_backend="python")
    assert all(isinstance(m, FixedSharpening) for m in sharp.skip_edges) and not sharp.edge_layers()
    frozen = EdgeUNet(spatial_dims, 1, 2, channels=(4, 8, 16), strides=(2, 2), edge_alpha_init=0.3,
                      edge_alpha_trainable=False, edge_backend="python")
    optimizer = torch.optim.AdamW(frozen.parameters(), lr=0.1)
    frozen(torch.randn(2, 1, *[8] * spatial_dims)).square().mean().backward()
    optimizer.step()
    assert len(frozen.edge_layers()) == 3
    assert all(torch.equal(layer.alpha, torch.full_like(layer.alpha, 0.3)) for layer in frozen.edge_layers())
    assert frozen.head.conv.weight.grad is not None  # the rest trains
    with pytest.raises(ValueError, match="skip_layer must be one of"):
        EdgeUNet(spatial_dims, 1, 2, skip_layer="blur")


def test_more_encoder_units_each_take_part_and_a_single_unit_per_level_is_todays_network():
    torch.manual_seed(0)
    deeper = EdgeUNet(2, 1, 3, [4, 8, 16], [2, [2, 1]], num_res_units=2, encoder_blocks=[1, 3, 2, 9],
                      edge_backend="python")
    assert [len(level) for level in deeper.more_blocks] == [0, 2, 1]  # cut to the three levels
    deeper(torch.randn(2, 1, 16, 12)).square().mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in deeper.more_blocks.parameters())
    plain = EdgeUNet(2, 1, 3, [4, 8, 16], [2, 2], edge_backend="python")
    assert plain.state_dict().keys() == EdgeUNet(2, 1, 3, [4, 8, 16], [2, 2], encoder_blocks=[1, 1, 1],
                                                 edge_backend="python").state_dict().keys()
    assert not any(name.startswith("more_blocks") for name in plain.state_dict())  # old checkpoints load
