"""Normalization by modality: CT by the dataset's foreground statistics (every volume alike),
MRI and the rest per volume over the body, noNorm and rescale_to_0_1 as nnU-Net names them; the
plan travels in the checkpoint to evaluation and prediction."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.data.normalization import NormalizeChannelsd, normalization_plan, normalize, scheme_of
from segnet.generated.phantom import write_case, write_dataset_json
from segnet.planning.record import dataset_fingerprint
from segnet.training.train import train


def ct_case(air_rows: int, seed: int, shape=(24, 24, 16)) -> tuple[np.ndarray, np.ndarray]:
    """Soft tissue (~40 HU) with a bone (~700 HU, label 1), and `air_rows` rows of air (-1000 HU)."""
    rng = np.random.default_rng(seed)
    image = rng.normal(40, 10, shape).astype(np.float32)
    label = np.zeros(shape, np.uint8)
    label[15:21, 8:14, 4:10] = 1  # below every air row the tests use
    image[label == 1] = rng.normal(700, 40, int(label.sum()))
    image[:air_rows] = -1000
    return image, label


def write_ct_dataset(root, modality="CT", cases=((2, 0), (12, 1), (6, 2))):
    names = [f"ct_{i:03d}" for i in range(len(cases))]
    for name, (air, seed) in zip(names, cases, strict=True):
        image, label = ct_case(air, seed)
        write_case(root, name, [image], label)
    return write_dataset_json(root, "decathlon", ("background", "bone"), [modality], names, name="CT")


def ct_plan(tmp_path):
    description = describe_dataset(str(write_ct_dataset(tmp_path / "CT")))
    fingerprint = dataset_fingerprint(description)
    return normalization_plan(description.channel_names, fingerprint["foreground_intensities"],
                              [c["nonzero_share"] for c in fingerprint["cases"]])


def test_ct_is_clipped_and_z_scored_with_the_foreground_statistics(tmp_path):
    (entry,) = ct_plan(tmp_path)
    assert entry["scheme"] == "ct"
    assert entry["mean"] == pytest.approx(700, abs=10) and entry["std"] == pytest.approx(40, abs=6)
    assert 550 < entry["percentile_00_5"] < 650 and 750 < entry["percentile_99_5"] < 850  # bone, not air
    image, label = ct_case(12, 1)
    normalized = normalize(torch.from_numpy(image), entry)
    assert normalized.min() == pytest.approx((entry["percentile_00_5"] - entry["mean"]) / entry["std"])  # air clipped
    assert float(normalized[torch.from_numpy(label) == 1].mean()) == pytest.approx(0.0, abs=0.1)


def test_ct_values_mean_the_same_whatever_the_amount_of_air(tmp_path):
    plan = ct_plan(tmp_path)
    bone = torch.from_numpy(ct_case(2, 0)[1] == 1)
    little_air, much_air = torch.from_numpy(ct_case(2, 0)[0]), torch.from_numpy(ct_case(12, 0)[0])
    ct = NormalizeChannelsd(keys="image", plan=plan)
    same = [ct({"image": v[None]})["image"][0][bone] for v in (little_air, much_air)]
    assert torch.allclose(same[0], same[1])  # one scale for every volume
    per_volume = [NormalizeChannelsd(keys="image")({"image": v[None]})["image"][0][bone]
                  for v in (little_air, much_air)]
    assert not torch.allclose(per_volume[0], per_volume[1], atol=0.1)  # what a per-volume z-score would do


STATS = {"mean": 0.0, "std": 1.0, "percentile_00_5": -1.0, "percentile_99_5": 1.0}


def test_other_schemes():
    channel = torch.tensor([[0.0, 2.0], [4.0, 6.0]])
    assert torch.equal(normalize(channel, {"scheme": "noNorm"}), channel)
    assert torch.allclose(normalize(channel, {"scheme": "rescale_to_0_1"}), channel / 6)
    body = normalize(channel, {"scheme": "zscore", "nonzero": True})
    assert body[0, 0] == 0 and torch.allclose(body[channel != 0].mean(), torch.tensor(0.0), atol=1e-6)
    schemes = normalization_plan(["CT", "T2", "noNorm", "rescale_to_0_1"], [STATS] * 4, [1.0])
    assert [e["scheme"] for e in schemes][1:] == ["zscore", "noNorm", "rescale_to_0_1"]


@pytest.mark.parametrize("name, scheme", [("NoNorm", "noNorm"), ("nonorm", "noNorm"), ("RGB_to_0_1", "rgb_to_0_1"),
                                          ("Rescale_To_0_1", "rescale_to_0_1"), ("ct", "ct"), (" CT", "ct"),
                                          ("T1", "zscore"), ("ZScore", "zscore"), ("noNormal", "zscore")])
def test_scheme_names_are_matched_casefolded_as_nnunet_matches_them(name, scheme):
    assert scheme_of(name) == scheme


def test_the_plan_is_in_the_run_folder_and_the_checkpoint(tmp_path):
    from segnet.inference.ensemble import Predictor
    from segnet.inference.loading import load_checkpoint
    from segnet.inference.prediction_writer import PredictionWriter

    root = write_ct_dataset(tmp_path / "CT")
    run = tmp_path / "run"
    train(compose_config(["data=folder", f"data.root={root}", "data.num_folds=3", "data.steps_per_epoch=1",
                          "data.patch_size=[16,16,16]", "data.num_workers=0", "data.batch_size=1", "op=cpp",
                          *TINY_MODEL, *TINY_TRAINER], output_dir=run))
    plan = json.loads((run / "plans.json").read_text())["normalization"]
    assert plan[0]["scheme"] == "ct"
    model = load_checkpoint(run / "checkpoints" / "last.ckpt", backend="cpp")
    assert model.data["normalization"] == plan
    writer = PredictionWriter(Predictor([model]), tmp_path / "out")
    normalizing = [t for t in writer.loads[0].transforms if isinstance(t, NormalizeChannelsd)]
    assert normalizing[0].plan == plan  # prediction normalizes as training did
