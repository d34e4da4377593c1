"""Whole-image inference: test-time augmentation mirrors as nnU-Net does (every combination of
flips of the spatial axes), and the whole image accumulates in host memory when the device's
runs out."""

from __future__ import annotations

import itertools

import pytest
import torch

from segnet.inference.windows import on_device_or_host, predict_logits, predict_with_flips


@pytest.mark.parametrize("axes", [(2, 3), (2, 3, 4)])
def test_flips_cover_every_combination_of_the_axes_and_are_undone(axes):
    image = torch.randn(1, 1, *[5 + axis for axis in axes])
    weights = torch.randn(1, 3, *image.shape[2:])  # a position-dependent model: not flip-equivariant
    seen = []

    def predict(batch):
        seen.append(batch)
        return batch * weights

    mean = predict_with_flips(predict, image, axes)
    combinations = [list(c) for n in range(len(axes) + 1) for c in itertools.combinations(axes, n)]
    assert len(seen) == len(combinations) == 2 ** len(axes)
    for flipped, batch in zip(combinations, seen, strict=True):
        assert torch.equal(batch, image.flip(flipped) if flipped else image)
    expected = sum((image.flip(f) * weights).softmax(1).flip(f) if f else (image * weights).softmax(1)
                   for f in combinations) / len(combinations)
    torch.testing.assert_close(mean, expected)


def test_out_of_device_memory_the_whole_image_accumulates_on_the_host():
    asked = []

    def run(output_device):
        asked.append(output_device)
        if output_device is None:  # on the GPU, the whole image's logits do not fit
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.50 GiB")
        return torch.ones(2, 3)

    with pytest.warns(UserWarning, match=r"the whole image of shape \(300, 512, 512\) did not fit in the memory of "
                                         r"cuda \(CUDA out of memory. Tried to allocate 3.50 GiB\): accumulating"):
        result = on_device_or_host(run, torch.device("cuda"), (300, 512, 512))
    assert asked == [None, torch.device("cpu")] and torch.equal(result, torch.ones(2, 3))


def test_out_of_host_memory_there_is_nowhere_else_to_go():
    def run(output_device):
        raise torch.OutOfMemoryError("out of memory")

    with pytest.raises(torch.OutOfMemoryError):
        on_device_or_host(run, torch.device("cpu"), (8, 8, 8))


@pytest.mark.parametrize("model_dims,image_shape,roi",
                         [(3, (1, 1, 20, 18, 16), (8, 8, 8)), (2, (1, 1, 12, 10, 6), (8, 8))])
def test_the_host_accumulates_what_the_device_would(model_dims, image_shape, roi):
    torch.manual_seed(0)
    conv = torch.nn.Conv3d(1, 3, 3, padding=1) if model_dims == 3 else torch.nn.Conv2d(1, 3, 3, padding=1)
    image = torch.randn(image_shape)
    with torch.no_grad():
        on_device = predict_logits(conv, image, model_dims, roi, sw_batch_size=2)
        on_host = predict_logits(conv, image, model_dims, roi, sw_batch_size=2, output_device=torch.device("cpu"))
    assert on_host.device.type == "cpu" and on_host.shape == (1, 3, *image_shape[2:])
    torch.testing.assert_close(on_host, on_device)
