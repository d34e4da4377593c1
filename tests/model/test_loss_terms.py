"""The loss terms of conf/loss/: the edge loss by hand and through the op, the boundary and
Skeleton Recall terms by hand on their maps, the weights and the ramp, MONAI's terms as MONAI
computes them, and the configurations that are refused."""

from __future__ import annotations

import math

import pytest
import torch
from monai.losses import HausdorffDTLoss, SoftclDiceLoss

from helpers.training import compose_config
from segnet.errors import ConfigError
from segnet.model.dice_ce import dice_ce_loss
from segnet.model.edge_loss import EdgeMatchingLoss, band_radius, dilate
from segnet.model.foreground import ForegroundUnits
from segnet.model.loss_terms import TrainingLoss, required_maps
from segnet.model.map_losses import BoundaryLoss, SkeletonRecallLoss

pytestmark = pytest.mark.usefixtures("cpu_library")

EPS = 1e-6
STEP = [[0, 0, 1, 1]]  # one row: the label steps from class 0 to 1 between columns 1 and 2


def step_case():
    label = torch.tensor(STEP, dtype=torch.float64)[None, None]  # (1, 1, 1, 4)
    uniform = torch.zeros(1, 2, 1, 4, dtype=torch.float64)  # softmax 0.5 everywhere: flat, no edge
    return uniform, label


@pytest.mark.parametrize("backend", ["python", "cpp"])
def test_edge_loss_by_hand_on_a_step(backend):
    # The label's edge along the row is (y[j+1] - y[j-1]) * 4 / 8 (the one row smoothed by its
    # clamped [1,2,1], the normalization 8): 0.5 at columns 1 and 2, 0 at the ends. The uniform
    # softmax is flat, sqrt(eps) everywhere.
    logits, label = step_case()
    edge, flat = math.sqrt(0.25 + EPS), math.sqrt(EPS)
    on_boundary = EdgeMatchingLoss(ForegroundUnits(2), band_mm=0.0, backend=backend)(logits, label, [[1.0, 1.0]])
    assert on_boundary.item() == pytest.approx(edge - flat, rel=1e-12)
    # A band of 1 mm takes in the two flat ends too, where both sides are flat.
    widened = EdgeMatchingLoss(ForegroundUnits(2), band_mm=1.0, backend=backend)(logits, label, [[1.0, 1.0]])
    assert widened.item() == pytest.approx(2 * (edge - flat) / 4, rel=1e-12)
    # The same 1 mm on 2 mm columns is under a voxel: the band stays on the boundary.
    coarse = EdgeMatchingLoss(ForegroundUnits(2), band_mm=1.0, backend=backend)(logits, label, [[1.0, 2.5]])
    assert coarse.item() == pytest.approx(edge - flat, rel=1e-12)


def test_the_band_follows_each_axis_spacing():
    assert band_radius([3.0, 0.8, 0.8], 2.0) == [1, 2, 2]
    mask = torch.zeros(1, 5, 9, 9, dtype=torch.bool)
    mask[0, 2, 4, 4] = True
    grown = dilate(mask, band_radius([3.0, 0.8, 0.8], 2.0))
    assert grown.sum().item() == 3 * 5 * 5
    assert grown[0, 1:4, 2:7, 2:7].all()


def test_edge_loss_gradcheck_through_the_fused_op_in_float64():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 6, 7, dtype=torch.float64, generator=generator).requires_grad_()
    label = torch.randint(0, 3, (2, 1, 6, 7), generator=generator).double()
    loss = EdgeMatchingLoss(ForegroundUnits(3), band_mm=1.0, backend="cpp")
    assert torch.autograd.gradcheck(lambda z: loss(z, label, [[1.0, 1.0]] * 2), (logits,))


@pytest.mark.parametrize("shape", [(2, 3, 9, 11), (1, 2, 5, 6, 7)])
def test_edge_loss_is_the_same_through_every_backend(shape):
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(shape, dtype=torch.float64, generator=generator)
    label = torch.randint(0, shape[1], (shape[0], 1, *shape[2:]), generator=generator).double()
    spacing = [[1.0] * (len(shape) - 2)] * shape[0]
    values = []
    for backend in ("python", "cpp"):
        z = logits.clone().requires_grad_()
        value = EdgeMatchingLoss(ForegroundUnits(shape[1]), 2.0, backend)(z, label, spacing)
        value.backward()
        values.append((value.detach(), z.grad))
    assert torch.allclose(values[0][0], values[1][0], rtol=1e-12)
    assert torch.allclose(values[0][1], values[1][1], rtol=1e-10, atol=1e-14)


def test_a_shifted_boundary_costs_more_than_the_right_one():
    label = torch.zeros(1, 1, 16, 16)
    label[..., 4:12, 4:12] = 1
    foreground = 8 * label - 4  # softmax sigmoid(8) inside, sigmoid(-8) outside
    right = torch.cat([-foreground, foreground], dim=1)
    shifted = right.roll(3, dims=-1)
    loss = EdgeMatchingLoss(ForegroundUnits(2), band_mm=2.0)
    assert loss(right, label, [[1.0, 1.0]]) < 0.01
    assert loss(shifted, label, [[1.0, 1.0]]) > 0.1


def test_the_ignored_region_and_its_rim_are_left_out():
    generator = torch.Generator().manual_seed(2)
    label = torch.randint(0, 2, (1, 1, 12, 12), generator=generator).float()
    label[..., :, 6:] = 2  # the ignore label
    logits = torch.randn(1, 2, 12, 12, generator=generator)
    other = logits.clone()
    other[..., :, 6:] = torch.randn(1, 2, 12, 6, generator=generator)  # only inside the ignored half
    loss = EdgeMatchingLoss(ForegroundUnits(2, ignore_label=2), band_mm=1.0)
    assert loss(other, label, [[1.0, 1.0]]).item() == pytest.approx(loss(logits, label, [[1.0, 1.0]]).item())


def test_a_batch_without_boundaries_gives_zero_with_a_gradient():
    logits = torch.randn(1, 2, 8, 8, requires_grad=True)
    value = EdgeMatchingLoss(ForegroundUnits(2))(logits, torch.zeros(1, 1, 8, 8), [[1.0, 1.0]])
    value.backward()
    assert value.item() == 0.0 and torch.equal(logits.grad, torch.zeros_like(logits))


def settings(**weights):
    return {"dice_ce": {"weight": weights.pop("dice_ce", 1.0)}, "ramp_steps": weights.pop("ramp_steps", 0),
            **{name: {"weight": weight} for name, weight in weights.items()}}


def random_case(classes=3, seed=3):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, classes, 16, 16, generator=generator)
    label = torch.randint(0, classes, (2, 1, 16, 16), generator=generator).float()
    return logits, label, [[1.0, 1.0]] * 2


def test_terms_are_weighted_and_ramped_in_after_dice_ce():
    logits, label, spacing = random_case()
    loss = TrainingLoss(settings(dice_ce=0.5, edge=2.0, hausdorff_dt=0.25, cldice=1.0, ramp_steps=10), 3, None, 1)
    half = loss(logits, label, 5, spacing)
    assert set(half) == {"loss", "dice_ce", "edge", "hausdorff_dt", "cldice"}
    added = 2.0 * half["edge"] + 0.25 * half["hausdorff_dt"] + 1.0 * half["cldice"]
    assert half["loss"].item() == pytest.approx((0.5 * half["dice_ce"] + 0.5 * added).item(), rel=1e-6)
    full = loss(logits, label, 20, spacing)
    assert full["loss"].item() == pytest.approx((0.5 * full["dice_ce"] + added).item(), rel=1e-6)
    assert loss(logits, label, 0, spacing)["loss"].item() == pytest.approx(0.5 * half["dice_ce"].item(), rel=1e-6)


def test_the_terms_are_the_libraries_own():
    logits, label, spacing = random_case()
    parts = TrainingLoss(settings(edge=1.0, hausdorff_dt=1.0, cldice=1.0), 3, None, 1)(logits, label, 0, spacing)
    assert parts["dice_ce"].item() == pytest.approx(dice_ce_loss(None)(logits, label).item(), rel=1e-6)
    monai = HausdorffDTLoss(include_background=False, to_onehot_y=True, softmax=True)(logits, label)
    assert parts["hausdorff_dt"].item() == pytest.approx(monai.item(), rel=1e-6)
    cldice = SoftclDiceLoss(iter_=3, include_background=False, to_onehot_y=True, softmax=True)(logits, label)
    assert parts["cldice"].item() == pytest.approx(cldice.item(), rel=1e-6)
    edge = EdgeMatchingLoss(ForegroundUnits(3))(logits, label, spacing)
    assert parts["edge"].item() == pytest.approx(edge.item(), rel=1e-6)


def test_weight_zero_terms_are_not_built_and_deep_supervision_stays_dice_ce_s():
    loss = TrainingLoss(settings(edge=0.0, cldice=1.0), 3, None, 2)
    assert set(loss.added) == {"cldice"}
    logits, label, spacing = random_case()
    coarse = torch.randn(2, 3, 8, 8)
    parts = loss([logits, coarse], label, 0, spacing)
    assert parts["dice_ce"].item() == pytest.approx(dice_ce_loss(None, 2)([logits, coarse], label).item(), rel=1e-6)
    assert parts["cldice"].item() == pytest.approx(TrainingLoss(settings(cldice=1.0), 3, None, 1)(
        logits, label, 0, spacing)["cldice"].item(), rel=1e-6)


@pytest.mark.parametrize("config,message", [
    (settings(dice_ce=0.0), r"every term has weight 0"),
    ({**settings(), "boundry": {"weight": 1.0}}, r"unknown term\(s\) boundry"),
])
def test_bad_loss_settings_are_refused(config, message):
    with pytest.raises(ConfigError, match=message):
        TrainingLoss(config, 3, None, 1)


@pytest.mark.parametrize("term", ["hausdorff_dt", "cldice"])
def test_maskless_terms_refuse_an_ignore_label(term):
    with pytest.raises(ConfigError, match=rf"loss.{term} cannot leave out the ignore label \(3\)"):
        TrainingLoss(settings(**{term: 1.0}), 3, 3, 1)


def test_loss_presets_add_their_term_to_dice_ce():
    default = compose_config([]).loss
    assert default.dice_ce.weight == 1.0 and default.edge.weight == 0.0 and default.ramp_steps == 0
    added = ("edge", "hausdorff_dt", "cldice", "boundary", "skeleton_recall")
    for term in added:
        chosen = compose_config([f"loss={term}"]).loss
        assert chosen.dice_ce.weight == 1.0 and chosen.ramp_steps == 50
        assert [name for name in added if chosen[name].weight] == [term]
    assert compose_config(["loss=boundary"]).loss.boundary.weight == 0.01  # its distances are in mm
    assert compose_config(["loss=hausdorff_dt"]).loss.hausdorff_dt.weight == 0.01  # and squared


def test_boundary_loss_by_hand():
    # a uniform softmax over 2 classes: p = 1/2, so the loss is half the mean distance; a
    # confident prediction of the class inside only takes the negative distances.
    distance = torch.tensor([[[[3.0, 1.0, -1.0, -2.0]]]])
    label = torch.tensor([[[[0.0, 0.0, 1.0, 1.0]]]])
    assert BoundaryLoss(ForegroundUnits(2))(torch.zeros(1, 2, 1, 4), label, distance).item() == pytest.approx(0.25 / 2)
    confident = torch.tensor([[[[20.0, 20.0, -20.0, -20.0]], [[-20.0, -20.0, 20.0, 20.0]]]])
    assert BoundaryLoss(ForegroundUnits(2))(confident, label, distance).item() == pytest.approx(-3.0 / 4, rel=1e-6)
    # with the last voxel ignored, the mean runs over the three known ones
    ignored = torch.tensor([[[[0.0, 0.0, 1.0, 3.0]]]])
    with_ignored = BoundaryLoss(ForegroundUnits(2, ignore_label=3))(torch.zeros(1, 2, 1, 4), ignored, distance)
    assert with_ignored.item() == pytest.approx(1.5 / 3)


def test_skeleton_recall_by_hand():
    # class 1's skeleton has 2 voxels, class 2 none: recalls (2 p + 1) / 3 and 1
    label = torch.tensor([[[[0.0, 1.0, 1.0, 0.0]]]])
    skeleton = torch.tensor([[[[0, 1, 1, 0]], [[0, 0, 0, 0]]]], dtype=torch.uint8)
    uniform = torch.zeros(1, 3, 1, 4)  # p = 1/3 everywhere
    loss = SkeletonRecallLoss(ForegroundUnits(3))(uniform, label, skeleton)
    assert loss.item() == pytest.approx(1 - ((2 / 3 + 1) / 3 + 1) / 2)


def test_map_terms_gradcheck_in_float64():
    generator = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 3, 5, 6, dtype=torch.float64, generator=generator).requires_grad_()
    label = torch.randint(0, 3, (2, 1, 5, 6), generator=generator).double()
    distance = torch.randn(2, 2, 5, 6, dtype=torch.float64, generator=generator)
    assert torch.autograd.gradcheck(lambda z: BoundaryLoss(ForegroundUnits(3))(z, label, distance), (logits,))
    tubes = ForegroundUnits(3).masks(label)
    assert torch.autograd.gradcheck(lambda z: SkeletonRecallLoss(ForegroundUnits(3))(z, label, tubes), (logits,))


def test_map_terms_read_the_batch_s_maps_and_say_where_they_come_from():
    logits, label, spacing = random_case()
    loss = TrainingLoss(settings(boundary=0.5, skeleton_recall=1.0), 3, None, 1)
    distance = torch.randn(2, 2, 16, 16)
    tubes = ForegroundUnits(3).masks(label)
    parts = loss(logits, label, 0, spacing, {"distance": distance, "skeleton": tubes})
    assert parts["boundary"].item() == pytest.approx(BoundaryLoss(ForegroundUnits(3))(logits, label, distance).item())
    assert parts["skeleton_recall"].item() == pytest.approx(
        SkeletonRecallLoss(ForegroundUnits(3))(logits, label, tubes).item())
    assert required_maps(settings(boundary=0.5, skeleton_recall=1.0)) == ["distance", "skeleton"]
    assert required_maps(settings(edge=1.0)) == []
    with pytest.raises(ConfigError, match=r"loss.boundary needs the label's distance maps.*data=folder"):
        loss(logits, label, 0, spacing)


def test_generated_data_and_loaded_sources_refuse_the_map_terms(tmp_path):
    from helpers.data import write_decathlon
    from segnet.training.folder_data import FolderDataModule
    from segnet.training.synthetic_data import SyntheticDataModule

    with pytest.raises(ConfigError, match="train on data=folder"):
        SyntheticDataModule(maps=["distance"])
    root = write_decathlon(tmp_path / "Task", cases=3)
    with pytest.raises(ConfigError, match="drop data.preprocessed=false"):
        FolderDataModule(str(root), preprocessed=False, maps=["skeleton"])


def only(term: str) -> dict:
    """A loss of one term alone."""
    return {**settings(dice_ce=0.0, **{term: 1.0})} if term != "dice_ce" else settings()


def test_dice_ce_hausdorff_dt_and_cldice_by_hand():
    uniform = torch.zeros(1, 2, 1, 4)  # softmax 1/2 everywhere
    step = torch.tensor([[[[0.0, 0.0, 1.0, 1.0]]]])
    spacing = [[1.0, 1.0]]
    # Dice 2 * (2 * 1/2) / (2 + 2) per class, smoothed by 1e-5; cross-entropy ln 2
    dice_ce = TrainingLoss(only("dice_ce"), 2, None, 1)(uniform, step, 0, spacing)["dice_ce"]
    assert dice_ce.item() == pytest.approx(1 - (2 + 1e-5) / (4 + 1e-5) + math.log(2), rel=1e-6)
    # The prediction (nothing above 1/2) has no distance field; the label's, to its boundary from
    # either side, is (2, 1, 1, 2); squared, times the squared error 1/4, averaged: 10/16.
    hausdorff = TrainingLoss(only("hausdorff_dt"), 2, None, 1)(uniform, step, 0, spacing)["hausdorff_dt"]
    assert hausdorff.item() == pytest.approx(10 / 16, rel=1e-6)
    # A line of 3 voxels is its own soft skeleton; the flat softmax has none: precision (0 + 1) /
    # (0 + 1) = 1, sensitivity (3 / 2 + 1) / (3 + 1) = 5/8.
    line = torch.zeros(1, 1, 3, 5)
    line[0, 0, 1, 1:4] = 1
    cldice = TrainingLoss(only("cldice"), 2, None, 1)(torch.zeros(1, 2, 3, 5), line, 0, [[1.0, 1.0]])["cldice"]
    assert cldice.item() == pytest.approx(1 - 2 * 0.625 / (1.625 + 1e-4), rel=1e-6)


@pytest.mark.parametrize("term", ["dice_ce", "hausdorff_dt", "cldice"])
def test_the_library_terms_gradcheck_in_float64(term):
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(1, 3, 5, 6, dtype=torch.float64, generator=generator).requires_grad_()
    label = torch.randint(0, 3, (1, 1, 5, 6), generator=generator).double()
    loss = TrainingLoss(only(term), 3, None, 1)
    assert torch.autograd.gradcheck(lambda z: loss(z, label, 0, [[1.0, 1.0]])[term], (logits,))
