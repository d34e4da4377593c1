"""The placement ablation's variants train, and every run records its validation cases' Dice, the
unit of the paired comparison between variants (segnet.evaluation.statistics)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers.training import compose_config, tiny_overrides
from segnet.model.sharpening import FixedSharpening
from segnet.training.api import train


@pytest.mark.parametrize("variant", ["sharp_skips", "frozen"])
def test_a_variant_trains_and_records_its_validation_cases(tmp_path, variant):
    metrics = train(compose_config(tiny_overrides() + ["op=cpp", f"variant={variant}", "data.num_val=3"],
                                   output_dir=tmp_path))
    per_case = metrics["val_dice_per_case"]
    assert len(per_case) == 3 and all(set(scores) == {"class1", "class2"} for scores in per_case.values())
    for name, mean in metrics["val_dice_per_class"].items():  # the logged mean is the mean of these cases
        values = [scores[name] for scores in per_case.values() if not math.isnan(scores[name])]
        assert mean == pytest.approx(np.mean(values), abs=1e-6)


def test_the_sharp_unet_variant_puts_the_fixed_filter_on_every_skip():
    from segnet.training.api import build_module

    cfg = compose_config(tiny_overrides() + ["variant=sharp_skips"])
    net = build_module(cfg, "cpp").net
    assert net.skip_edges and all(isinstance(m, FixedSharpening) for m in net.skip_edges)
    assert not net.edge_layers()
