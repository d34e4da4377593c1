"""Test-time augmentation mirrors as nnU-Net does: every combination of flips of the spatial axes."""

from __future__ import annotations

import itertools

import pytest
import torch

from segnet.inference.windows import predict_with_flips


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
