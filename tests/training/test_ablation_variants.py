"""The placement ablation's variants train, and every run records its validation cases' Dice, HD95
and NSD, the unit of the paired comparison between variants (segnet.evaluation.statistics)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from monai.data import MetaTensor

from helpers.training import compose_config, tiny_overrides
from segnet.model.sharpening import FixedSharpening
from segnet.training import module
from segnet.training.train import train


@pytest.mark.parametrize("variant", ["sharp_skips", "frozen"])
def test_a_variant_trains_and_records_its_validation_cases(tmp_path, variant, monkeypatch):
    surface_calls = []
    scores_of = module.surface_scores
    monkeypatch.setattr(module, "surface_scores", lambda *a: surface_calls.append(a) or scores_of(*a))
    metrics = train(compose_config(tiny_overrides() + ["op=cpp", f"variant={variant}", "data.num_val=3",
                                                       "trainer.max_epochs=2"], output_dir=tmp_path))
    per_case = metrics["val_dice_per_case"]
    assert len(per_case) == 3 and all(set(scores) == {"class1", "class2"} for scores in per_case.values())
    for name, mean in metrics["val_dice_per_class"].items():  # the logged mean is the mean of these cases
        values = [scores[name] for scores in per_case.values() if not math.isnan(scores[name])]
        assert mean == pytest.approx(np.mean(values), abs=1e-6)
    hd95, nsd = metrics["val_hd95_per_case"], metrics["val_nsd_per_case"]
    assert set(hd95) == set(nsd) == set(per_case)
    diagonal = math.hypot(31, 31)  # 32 x 32 images at 1 mm: the penalty of a class on one side only
    for case, dice in per_case.items():
        for name, value in dice.items():
            if math.isnan(value):  # in neither the prediction nor the reference
                assert math.isnan(hd95[case][name]) and math.isnan(nsd[case][name])
            else:
                assert 0 <= hd95[case][name] <= diagonal + 1e-6 and 0 <= nsd[case][name] <= 1
    # two validations within fit and the final one: only the final one measures distances, once a case
    assert len(surface_calls) == 3
    assert all(call[3] == [1.0, 1.0] and call[0].shape == (32, 32) for call in surface_calls)


def test_validation_measures_distances_in_the_cases_spacing():
    image = torch.zeros(1, 1, 4, 4, 4)
    given = {"image": image, "spacing": torch.tensor([[0.5, 0.7, 3.0]], dtype=torch.float64)}
    assert module.case_spacing(given, 0, 3) == [0.5, 0.7, 3.0]
    loaded = MetaTensor(image, affine=torch.diag(torch.tensor([0.8, 0.9, 2.5, 1.0], dtype=torch.float64)))
    assert module.case_spacing({"image": loaded}, 0, 3) == pytest.approx([0.8, 0.9, 2.5])
    assert module.case_spacing({"image": torch.zeros(2, 1, 4, 4)}, 1, 2) == [1.0, 1.0]  # generated: 1 mm


def test_the_sharp_unet_variant_puts_the_fixed_filter_on_every_skip():
    from segnet.training.train import build_module

    cfg = compose_config(tiny_overrides() + ["variant=sharp_skips"])
    net = build_module(cfg, "cpp").net
    assert net.skip_edges and all(isinstance(m, FixedSharpening) for m in net.skip_edges)
    assert not net.edge_layers()
