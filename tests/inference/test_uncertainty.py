"""segnet-predict uncertainty=true (segnet.inference.uncertainty): the measures on probabilities
made by hand, and the maps and uncertainty.csv written beside label maps that stay as they were."""

from __future__ import annotations

import csv
import math

import nibabel as nib
import numpy as np
import pytest
import torch

from helpers.training import compose_config
from segnet.inference.predict import predict_command
from segnet.inference.uncertainty import case_uncertainty, disagreement, with_member_entropy


def test_mutual_information_separates_members_that_disagree_from_members_unsure_alike():
    sure_and_opposed = [torch.tensor([[[1.0], [0.0]]]), torch.tensor([[[0.0], [1.0]]])]  # (N, classes, voxels)
    unsure_alike = [torch.tensor([[[0.5], [0.5]]])] * 2
    for members, member_entropy, information in ((sure_and_opposed, 0.0, math.log(2)), (unsure_alike, math.log(2), 0)):
        joined = with_member_entropy(members, regions=False)[0]
        assert joined[:2, 0].tolist() == [0.5, 0.5] and joined[2, 0].item() == pytest.approx(member_entropy, abs=1e-6)
        assert disagreement(joined, regions=False)[0].item() == pytest.approx(information, abs=1e-6)
    # a region's binary entropy: two members sure of opposite answers, one region
    joined = with_member_entropy([torch.tensor([[[1.0]]]), torch.tensor([[[0.0]]])], regions=True)[0]
    assert disagreement(joined, regions=True)[0].item() == pytest.approx(math.log(2), abs=1e-6)


def test_the_case_score_and_uncertain_volumes_are_the_hand_worked_numbers():
    # four voxels, classes background, 1, 2: class 1 sure on voxel 0, unsure on voxel 1; class 2 unsure on voxel 2
    probabilities = np.array([[0.0, 0.4, 0.5, 1.0], [1.0, 0.6, 0.0, 0.0], [0.0, 0.0, 0.5, 0.0]])
    label_map = probabilities.argmax(0)  # [1, 1, 0, 0]
    found = case_uncertainty(probabilities, np.array([0.0, 0.0, math.log(3), 0.0]), label_map, [(1,), (2,)],
                             False, voxel_mm3=2.0)
    # class 1: uncertain {1}, labelled {0, 1}; class 2: uncertain {2}, labelled none: 2 of 3
    assert found["score"] == pytest.approx(2 / 3)
    assert found["uncertain_mm3"].tolist() == [2.0, 2.0]
    assert found["entropy"] == pytest.approx([0, -(0.4 * math.log(0.4) + 0.6 * math.log(0.6)) / math.log(3),
                                              math.log(2) / math.log(3), 0], abs=1e-6)
    assert found["mutual_information"] == pytest.approx([0, 0, 1, 0])


def test_uncertainty_writes_maps_and_a_table_and_leaves_the_label_maps_as_they_were(trained_3d, trained_2d, tmp_path):
    # two configurations, each mirrored: its members (the mutual information is within a configuration)
    models = f"ckpt_path=[{trained_3d.checkpoint},{trained_2d.checkpoint}]"

    def predict(name, *asked):
        predict_command(compose_config([models, f"input={trained_3d.root / 'imagesTr'}", f"output={tmp_path / name}",
                                        "num_workers=0", "save_probabilities=true", "tta=true", "op=cpp", *asked],
                                       name="predict"))

    predict("plain")
    predict("unsure", "uncertainty=true")
    rows = list(csv.DictReader(open(tmp_path / "unsure" / "uncertainty.csv")))
    assert list(rows[0]) == ["case", "score", "uncertain_mm3_core", "uncertain_mm3_shell"]
    assert [row["case"] for row in rows] == ["case_000", "case_001", "case_002"]
    for row in rows:
        name = row["case"]
        plain, unsure = (np.asarray(nib.load(tmp_path / run / f"{name}.nii.gz").dataobj) for run in ("plain", "unsure"))
        assert np.array_equal(plain, unsure)
        assert np.allclose(np.load(tmp_path / "plain" / f"{name}.npz")["probabilities"],
                           np.load(tmp_path / "unsure" / f"{name}.npz")["probabilities"], atol=1e-6)
        maps = np.load(tmp_path / "unsure" / f"{name}_uncertainty.npz")
        assert maps["entropy"].shape == plain.shape == maps["mutual_information"].shape
        assert 0 <= maps["mutual_information"].min() and maps["mutual_information"].max() <= maps["entropy"].max() <= 1
        assert maps["mutual_information"].max() > 0  # the mirrorings disagree somewhere
        assert float(row["score"]) == pytest.approx(float(maps["score"])) and 0 < float(row["score"]) <= 1
    assert not list((tmp_path / "plain").glob("*_uncertainty.npz"))


def test_continue_predicts_again_what_another_temperature_tempered(trained_2d, tmp_path):
    def predict(*asked):
        predict_command(compose_config([f"ckpt_path={trained_2d.checkpoint}", f"input={trained_2d.root / 'imagesTr'}",
                                        f"output={tmp_path}", "num_workers=0", "save_probabilities=true",
                                        "uncertainty=true", "tta=false", "op=cpp", "continue=true", *asked],
                                       name="predict"))

    def written(name):
        return {kind: np.load(tmp_path / f"{name}{kind}.npz") for kind in ("", "_uncertainty")}

    predict("temperature=1")
    first = {kind: dict(saved) for kind, saved in written("case_000").items()}
    assert first[""]["temperature"].tolist() == first["_uncertainty"]["temperature"].tolist() == [1.0]
    stamp = (tmp_path / "case_000.npz").stat().st_mtime_ns
    predict("temperature=1")  # the same: reused
    assert (tmp_path / "case_000.npz").stat().st_mtime_ns == stamp
    predict("temperature=3")  # the label maps are the same, their probabilities are not
    again = written("case_000")
    assert again[""]["temperature"].tolist() == again["_uncertainty"]["temperature"].tolist() == [3.0]
    assert not np.allclose(again[""]["probabilities"], first[""]["probabilities"], atol=1e-3)
    assert again["_uncertainty"]["score"] != first["_uncertainty"]["score"]
