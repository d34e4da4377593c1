"""Fingerprint and plan: target spacing (median, nnU-Net's anisotropic rule), orientation and
slicing axis, patch and batch size from the memory the network needs, the plan in the run folder
and the checkpoint, passed back in; resampling there and back, whatever the stored orientation."""

from __future__ import annotations

import json
import math
import re

import nibabel as nib
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from helpers.commands import run_command
from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.data.transforms import eval_transforms
from segnet.errors import ConfigError
from segnet.generated.phantom import sample_phantom, write_phantom_dataset
from segnet.inference.ensemble import Predictor
from segnet.inference.loading import load_checkpoint
from segnet.inference.prediction_writer import PredictionWriter
from segnet.inference.trained_model import TrainedModel
from segnet.metrics import dice_per_class
from segnet.planning.fingerprint import ras_geometry
from segnet.planning.planner import (
    BATCH_SHARE,
    MIN_BATCH,
    Budget,
    orientation,
    patch_and_batch,
    plan_dataset,
    saved_bytes_per_voxel,
    slicing_axis,
    target_spacing,
)
from segnet.planning.record import dataset_fingerprint
from segnet.training.train import train

MODEL = {"channels": [8, 16, 32], "strides": [2, 2], "num_res_units": 1, "norm": "instance", "act": "prelu",
         "dropout": 0.0, "edge_placement": ["input", "skips"], "edge_alpha_init": 0.1}
# One anatomy, stored as different scanners store it: isotropic RAS, thick-slice LPS, and
# thick slices along R with permuted axes.
CROPS_PER_VOLUME = 2  # conf/data/folder.yaml's samples_per_volume
MIXED_GRIDS = [((1.0, 1.0, 1.0), "RAS"), ((0.75, 0.75, 2.0), "LPS"), ((2.0, 0.75, 0.75), "SAR"),
               ((0.75, 0.75, 2.0), "RAS"), ((0.75, 2.0, 0.75), "LSA")]


def test_stored_orientation_does_not_change_the_fingerprint():
    # thick slices along S, however the axes are stored
    for axcodes, spacing in (("RAS", (0.75, 0.75, 2.0)), ("LPS", (0.75, 0.75, 2.0)), ("SAR", (2.0, 0.75, 0.75)),
                             ("PIL", (0.75, 2.0, 0.75))):
        image, _, affine = sample_phantom(spacing, axcodes)
        spacing, shape = ras_geometry(affine, image.shape)
        assert spacing == pytest.approx([0.75, 0.75, 2.0]) and shape == [64, 64, 24], axcodes


def test_target_spacing_is_the_median_unless_strongly_anisotropic():
    shapes = np.array([[200, 200, 100]] * 5)
    spacings = np.array([[0.8, 0.8, 1.0], [0.7, 0.7, 1.5], [0.8, 0.8, 2.0], [0.9, 0.9, 2.5], [0.8, 0.8, 3.0]])
    assert target_spacing(spacings, shapes) == pytest.approx([0.8, 0.8, 2.0])
    # 5 mm slices, 3.3 mm in a few cases; and few slices: the coarse axis takes the 10th percentile
    thick = np.array([[0.7, 0.7, 5.0]] * 8 + [[0.7, 0.7, 3.3]] * 2)
    few = np.array([[512, 512, 40]] * 10)
    assert target_spacing(thick, few) == pytest.approx([0.7, 0.7, np.percentile(thick[:, 2], 10)])
    assert np.percentile(thick[:, 2], 10) < 5.0
    # anisotropic spacing but as many slices as rows: the median stands
    assert target_spacing(thick, np.array([[100, 100, 100]] * 10)) == pytest.approx([0.7, 0.7, 5.0])


def test_the_slicing_axis_is_the_coarsest_and_goes_last():
    assert orientation(2) == "RAS" and orientation(0) == "ASR" and orientation(1) == "RSA"
    assert slicing_axis([3.0, 0.8, 0.8], [40, 200, 200]) == 0
    assert slicing_axis([1.0, 1.0, 1.0], [200, 200, 200]) == 2  # ties: the last
    # a 2D dataset is sliced along the axis its images lack, whatever that axis's spacing
    assert slicing_axis([0.8, 0.8, 0.5], [512, 512, 1]) == 2
    assert slicing_axis([0.8, 0.5, 0.8], [512, 1, 512]) == 1


def test_saved_bytes_scale_with_the_patch_voxels():
    """The memory model's one assumption: activations grow with voxels (counted, not timed)."""
    per_voxel = saved_bytes_per_voxel(MODEL, 3, 1, 3)
    from segnet.model.network import EdgeUNet

    net = EdgeUNet(3, 1, 3, MODEL["channels"], MODEL["strides"], edge_backend="python")
    weights = {p.data_ptr() for p in net.parameters()}
    saved: dict[int, int] = {}

    def count(t):
        if t.data_ptr() not in weights:
            saved[t.data_ptr()] = t.numel() * t.element_size()
        return t

    x = torch.zeros(1, 1, 24, 16, 20, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        net(x)
    assert sum(saved.values()) / x.numel() == pytest.approx(per_voxel, rel=0.1)
    assert per_voxel > 4 * sum(MODEL["channels"][:1])  # at least the top level's feature maps


def training_step_peak_bytes(net, batch: int, patch, device: str, trace_path) -> int:
    """The most memory one training step (forward, Dice + cross-entropy, backward) holds at once
    beyond what existed before it (weights, the batch): on a GPU, the caching allocator's peak; on
    the CPU, the running sum of every allocation and free the profiler sees in torch's CPU
    allocator (every tensor, and any scratch a kernel takes from it; not only what autograd saves)."""
    from segnet.model.dice_ce import SegmentationLoss

    net = net.to(device)
    x = torch.randn(batch, 1, *patch, device=device)
    y = torch.randint(0, 3, (batch, 1, *patch), device=device)
    loss = SegmentationLoss()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        loss(net(x), y).backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
        loss(net(x), y).backward()
    profile.export_chrome_trace(str(trace_path))
    events = json.loads(trace_path.read_text())["traceEvents"]
    memory = sorted((e for e in events if e.get("name") == "[memory]" and e["args"]["Device Type"] == 0),
                    key=lambda e: float(e["ts"]))
    assert len(memory) > 100  # the profiler saw the step's allocations
    return int(np.cumsum([e["args"]["Bytes"] for e in memory]).max())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_the_plans_budget_holds_a_real_training_step(tmp_path, monkeypatch, device):
    """The memory model against memory used: the mixed dataset planned for 10 MiB, one training
    step of the planned batch and patch with the backend training uses there (the planner counts
    with the python op) stays within the budget, and not far below it (patch and batch are limited
    by the budget here, not by the median shape or BATCH_SHARE). A model that counted a quarter of
    the bytes would plan a step that overruns the budget."""
    from segnet.model.network import build_network
    from segnet.planning import planner

    description = describe_dataset(str(write_phantom_dataset(tmp_path / "Phantom", MIXED_GRIDS)))
    fingerprint = dataset_fingerprint(description)
    budget_gb = 0.01
    budget = budget_gb * 2**30
    backend = "cpp" if device == "cpu" else "cuda"

    def planned_peaks() -> dict[str, float]:
        plan = plan_dataset(description, fingerprint, MODEL, Budget(budget_gb), CROPS_PER_VOLUME)
        peaks = {}
        for dims in (2, 3):
            config = plan["configurations"][f"{dims}d"]
            net = build_network(MODEL, backend, spatial_dims=dims, in_channels=1, out_channels=3)
            peak = training_step_peak_bytes(net, config["crops_per_step"], config["patch_size"], device,
                                            tmp_path / f"trace{dims}d.json")
            peaks[f"{dims}d {config['crops_per_step']} x {config['patch_size']}"] = peak / budget
        return peaks

    peaks = planned_peaks()
    assert all(0.5 < share <= 1.0 for share in peaks.values()), peaks  # about 0.7 to 0.8 on the CPU
    counted = planner.saved_bytes_per_voxel
    monkeypatch.setattr(planner, "saved_bytes_per_voxel", lambda *args: counted(*args) / 4)
    assert all(share > 1.0 for share in planned_peaks().values())  # the check can fail


def test_patch_and_batch_fit_the_budget():
    per_voxel, stride = 1000.0, 8
    strides = [stride] * 3
    patch, batch = patch_and_batch([150, 130, 60], [0.8, 0.8, 2.5], strides, per_voxel, 16 * 2**30, 1e12)
    assert all(p % stride == 0 for p in patch) and patch == [152, 136, 64]  # the median shape fits
    assert batch * np.prod(patch) * per_voxel <= 16 * 2**30 and batch >= MIN_BATCH
    small, small_batch = patch_and_batch([150, 130, 60], [0.8, 0.8, 2.5], strides, per_voxel, 2**30, 1e12)
    assert np.prod(small) * per_voxel * MIN_BATCH <= 2**30 and all(s <= p for s, p in zip(small, patch, strict=True))
    # shrinking takes the widest axis in mm first: the field of view stays as round as the steps allow
    extent_mm = [n * mm for n, mm in zip(small, [0.8, 0.8, 2.5], strict=True)]
    assert small == [120, 120, 32] and max(extent_mm) - min(extent_mm) <= stride * 2.5
    # a tiny dataset: no more than BATCH_SHARE of its voxels per step, but never below MIN_BATCH
    _, capped = patch_and_batch([32, 32, 32], [1, 1, 1], strides, 10.0, 16 * 2**30, 20 * 32**3)
    # per axis: an anisotropic network shrinks each axis by its own stride
    thin, _ = patch_and_batch([150, 130, 60], [0.8, 0.8, 2.5], [16, 16, 4], per_voxel, 2**30, 1e12)
    assert thin == [112, 112, 40]  # 40 along the 4-stride axis: no multiple of 16
    assert capped == max(MIN_BATCH, int(BATCH_SHARE * 20))


def test_plan_of_mixed_scanners(tmp_path):
    root = write_phantom_dataset(tmp_path / "Phantom", MIXED_GRIDS)
    description = describe_dataset(str(root))
    fingerprint = dataset_fingerprint(description)
    assert [c["spacing"] for c in fingerprint["cases"]][1:3] == [pytest.approx([0.75, 0.75, 2.0])] * 2
    plan = plan_dataset(description, fingerprint, MODEL, Budget(1.0), CROPS_PER_VOLUME)
    assert plan["slicing_axis"] == "S" and plan["orientation"] == "RAS"
    assert plan["target_spacing"] == pytest.approx([0.75, 0.75, 2.0])  # the median per axis
    assert plan["configurations"]["2d"]["spacing"] == pytest.approx([0.75, 0.75, 0.0])
    assert plan["configurations"]["3d"]["patch_size"] == [64, 64, 24]  # 48 mm at the target spacing
    assert len(plan["configurations"]["2d"]["patch_size"]) == 2
    assert plan["class_voxels"][1] > 0 and plan["normalization"][0]["scheme"] == "zscore"


def test_sagittal_thick_slices_slice_along_r(tmp_path):
    root = write_phantom_dataset(tmp_path / "Sagittal", [((2.0, 0.75, 0.75), "LPS")] * 2 + [((2.0, 0.8, 0.8), "RAS")])
    description = describe_dataset(str(root))
    plan = plan_dataset(description, dataset_fingerprint(description), MODEL, Budget(1.0), CROPS_PER_VOLUME)
    assert plan["slicing_axis"] == "R" and plan["orientation"] == "ASR"
    assert plan["target_spacing"] == pytest.approx([0.75, 0.75, 2.0])  # in A, S, R order


def test_every_case_loads_on_the_grid_its_plan_describes(tmp_path):
    """The mixed and the sagittal datasets' cases, loaded with their plan's 3D and 2D
    configurations: the plan's spacing (the affine's column norms; the case's own along the
    slicing axis in 2D), the plan's axis codes, and as many voxels as the stored field of view
    (voxels x spacing, read from the stored affine) holds at that spacing, within one.
    tests/data/test_resampling.py checks the voxels themselves."""
    sagittal = [((2.0, 0.75, 0.75), "LPS")] * 2 + [((2.0, 0.8, 0.8), "RAS")]
    for name, grids in (("Mixed", MIXED_GRIDS), ("Sagittal", sagittal)):
        description = describe_dataset(str(write_phantom_dataset(tmp_path / name, grids)))
        plan = plan_dataset(description, dataset_fingerprint(description), MODEL, Budget(1.0), CROPS_PER_VOLUME)
        orientation = plan["orientation"]
        for dims in ("3d", "2d"):
            target = plan["configurations"][dims]["spacing"]
            load = eval_transforms(True, orientation=orientation, spacing=target, normalization=plan["normalization"])
            for case in description.training:
                stored = nib.load(case.label)
                sample = load({"image": case.images[0], "label": case.label})
                for key in ("image", "label"):
                    where = f"{name} {case.name} {key}, {dims} plan {orientation} {target}"
                    affine = np.asarray(sample[key].affine, np.float64)
                    assert "".join(nib.aff2axcodes(affine)) == orientation, where
                    spacing = np.linalg.norm(affine[:3, :3], axis=0)
                    for k, code in enumerate(orientation):
                        stored_axis = int(np.argmax(np.abs(stored.affine["RAS".index(code), :3])))
                        own = float(np.linalg.norm(stored.affine[:3, stored_axis]))
                        assert spacing[k] == pytest.approx(target[k] or own, abs=1e-5), (where, code)
                        field_of_view_mm = stored.shape[stored_axis] * own
                        assert abs(sample[key].shape[1 + k] - field_of_view_mm / spacing[k]) <= 1, (where, code)


def test_predictions_return_to_each_stored_geometry(tmp_path):
    """An oracle that answers with the label as the plan loads it: resampled to 0.75 x 0.75 x 2 mm
    in RAS and back, each prediction lies on its image's own grid and matches its label."""
    root = write_phantom_dataset(tmp_path / "Phantom", MIXED_GRIDS)
    description = describe_dataset(str(root))
    plan = plan_dataset(description, dataset_fingerprint(description), MODEL, Budget(1.0), CROPS_PER_VOLUME)
    geometry = {"orientation": plan["orientation"], "spacing": plan["configurations"]["3d"]["spacing"]}

    class Oracle(PredictionWriter):
        def predict(self, image, configuration):
            label = eval_transforms(True, **geometry)({"image": self.case.images[0], "label": self.case.label})["label"]
            return torch.nn.functional.one_hot(label[0].long(), 3).movedim(-1, 0).float()

        def run_case(self, case):
            self.case = case
            return super().run_case(case)

    model = TrainedModel(None, {"class_names": ["background", "core", "shell"], "in_channels": 1, "spatial_dims": 3,
                                **geometry}, {}, torch.device("cpu"))  # the oracle predicts, not a network
    writer = Oracle(Predictor([model]), tmp_path / "out")
    for case in description.training:
        prediction = writer.run_case(case)
        written, stored = nib.load(prediction.file), nib.load(case.label)
        assert written.shape == stored.shape and np.allclose(written.affine, stored.affine)
        reference = torch.from_numpy(np.asarray(stored.dataobj).astype(np.int64))
        dice = dice_per_class(torch.from_numpy(np.asarray(written.dataobj).astype(np.int64)), reference, [(1,), (2,)])
        assert dice[0] > 0.9 and dice[1] > 0.75, (case.name, dice)  # nearest-neighbour there and back
        if case.name == "phantom_003":  # already on the target grid: exactly itself
            assert dice == [1.0, 1.0]


def test_training_plans_writes_and_takes_back_its_plan(tmp_path):
    root = write_phantom_dataset(tmp_path / "Phantom", MIXED_GRIDS)
    common = ["data=folder", f"data.root={root}", "data.num_folds=5", "data.steps_per_epoch=1",
              "data.num_workers=0", "data.memory_budget_gb=0.05", "data.spatial_dims=2", "op=cpp", *TINY_MODEL,
              *TINY_TRAINER]
    composed = compose_config(common, output_dir=tmp_path / "planned")
    train(composed)
    plan = json.loads((tmp_path / "planned" / "plans.json").read_text())
    planned = plan["configurations"]["2d"]
    assert "fingerprint" in plan and len(plan["fingerprint"]["cases"]) == len(MIXED_GRIDS)
    data = load_checkpoint(tmp_path / "planned" / "checkpoints" / "last.ckpt", backend="cpp").data
    assert data["patch_size"] == planned["patch_size"] and data["spacing"] == planned["spacing"]
    assert data["plan"]["configurations"] == plan["configurations"] and "fingerprint" not in data["plan"]
    # the run folder's config.yaml is the configuration that trained, resolved: the plan's patch,
    # batch (volumes, as data.batch_size counts them: the crops the budget fits over
    # samples_per_volume) and spacing; the composed one is left alone
    written = (tmp_path / "planned" / "config.yaml").read_text()
    assert "${" not in written  # resolved: no interpolation left to resolve differently later
    trained = OmegaConf.create(written)
    assert trained.data.patch_size == trained.inference.roi_size == planned["patch_size"]
    assert planned["samples_per_volume"] == trained.data.samples_per_volume
    assert trained.data.batch_size == planned["batch_size"] == math.ceil(
        planned["crops_per_step"] / planned["samples_per_volume"])
    assert trained.data.spacing == planned["spacing"] and trained.data.batch_size == data["batch_size"]
    assert composed.data.patch_size is None and composed.data.batch_size is None and composed.data.spacing is None

    plan["configurations"]["2d"]["patch_size"] = [32, 32]  # an edited plan, passed back in
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(plan))
    train(compose_config([*common, f"data.plan={edited}"], output_dir=tmp_path / "edited_run"))
    data = load_checkpoint(tmp_path / "edited_run" / "checkpoints" / "last.ckpt", backend="cpp").data
    assert data["patch_size"] == [32, 32]
    train(compose_config([*common, "data.patch_size=[16,16]", "data.resample=false"], output_dir=tmp_path / "own"))
    data = load_checkpoint(tmp_path / "own" / "checkpoints" / "last.ckpt", backend="cpp").data
    assert data["patch_size"] == [16, 16] and data["spacing"] is None  # the user's values win


def test_planning_draws_no_random_numbers_from_the_runs_stream(tmp_path):
    """The network that trains is initialized from the seeded stream after planning: what
    planning counted (how many networks, which) must not change it."""
    description = describe_dataset(str(write_phantom_dataset(tmp_path / "Phantom", MIXED_GRIDS[:3])))
    fingerprint = dataset_fingerprint(description)
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    plan_dataset(description, fingerprint, MODEL, Budget(1.0, step_gflops=1.0), CROPS_PER_VOLUME)
    assert torch.equal(torch.rand(4), expected)


def test_plan_script_writes_a_plan_and_nothing_else_and_verify_lists_broken_cases(tmp_path):
    root = write_phantom_dataset(tmp_path / "Phantom", MIXED_GRIDS[:3])
    started_in = tmp_path / "cwd"
    started_in.mkdir()
    done = run_command("segnet-plan", f"data.root={root}", f"output={tmp_path / 'plan' / 'plans.json'}", timeout=300,
                       cwd=started_in)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "plan" / "plans.json").read_text())["orientation"] == "RAS"
    # a 2D plan's spacing as two in-plane values (its stored 0 along the slicing axis is no spacing)
    assert re.search(r"2d: spacing \[[\d.]+, [\d.]+\] in plane,", done.stdout + done.stderr), done.stdout[-2000:]
    # Told where to write, the command leaves neither .hydra/ nor plan.log beside the plan, nor an
    # outputs/plan/<date>/ folder where it was started.
    assert [p.name for p in (tmp_path / "plan").iterdir()] == ["plans.json"]
    assert not any(started_in.iterdir())
    args = [f"data.root={root}", f"hydra.run.dir={tmp_path}/h"]
    label = nib.load(root / "labelsTr" / "phantom_001.nii.gz")
    broken = np.asarray(label.dataobj).copy()
    broken[0, 0, 0] = 7
    nib.save(nib.Nifti1Image(broken, label.affine), str(root / "labelsTr" / "phantom_001.nii.gz"))
    verified = run_command("segnet-plan", *args, "--verify", timeout=300)
    assert verified.returncode != 0
    assert "case phantom_001: " in verified.stderr and "label values 7 are not classes" in verified.stderr
    assert "Traceback" not in verified.stderr
    assert not (tmp_path / "h").exists()  # the failed command's run folder held only Hydra's files


def test_two_channel_ct_and_mri_cases_plan_train_and_predict(tmp_path):
    root = write_phantom_dataset(tmp_path / "Dataset002_Two", MIXED_GRIDS[:4], modalities=("CT", "T2"))
    run = tmp_path / "run"
    train(compose_config(["data=folder", f"data.root={root}", "data.num_folds=2", "data.steps_per_epoch=1",
                          "data.num_workers=0", "data.spatial_dims=2", "data.patch_size=[16,16]", "op=cpp",
                          *TINY_MODEL, *TINY_TRAINER], output_dir=run))
    plan = json.loads((run / "plans.json").read_text())
    ct, t2 = plan["normalization"]
    assert ct["scheme"] == "ct" and t2 == {"channel": "T2", "scheme": "zscore", "nonzero": False}
    # under the labels only: the shell (about 100 HU here) and the core (300), not the background (-100)
    assert 100 < ct["mean"] < 300 and -60 < ct["percentile_00_5"] < 100 and 300 < ct["percentile_99_5"] < 450
    assert len(plan["fingerprint"]["foreground_intensities"]) == 2
    out = tmp_path / "predicted"
    writer = PredictionWriter(Predictor([load_checkpoint(run / "checkpoints" / "last.ckpt", backend="cpp")]), out)
    from segnet.inference.input_cases import find_cases

    (case, *_) = find_cases(root / "imagesTr", in_channels=2)
    written = nib.load(writer.run_case(case).file)
    stored = nib.load(case.images[1])
    assert written.shape == stored.shape and np.allclose(written.affine, stored.affine)


def test_images_that_are_not_volumes_are_one_clear_error(tmp_path):
    from segnet.errors import DatasetError

    root = write_phantom_dataset(tmp_path / "Flat", MIXED_GRIDS[:2])
    for folder in ("imagesTr", "labelsTr"):
        stored = nib.load(root / folder / "phantom_001.nii.gz")
        flat = np.asarray(stored.dataobj)[:, :, 10]
        nib.save(nib.Nifti1Image(flat, stored.affine), str(root / folder / "phantom_001.nii.gz"))
    description = describe_dataset(str(root))
    flat_case = r"case phantom_001: .*phantom_001.nii.gz: a 2D image; a 3D volume is expected"
    with pytest.raises(DatasetError, match=flat_case):
        plan_dataset(description, dataset_fingerprint(description), MODEL, Budget(1.0), CROPS_PER_VOLUME)


def test_a_plan_passed_in_that_does_not_fit_is_one_clear_error(tmp_path):
    from segnet.errors import ConfigError
    from segnet.planning.plan import read_plan

    description = describe_dataset(str(write_phantom_dataset(tmp_path / "Phantom", MIXED_GRIDS[:2])))
    path = tmp_path / "plans.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        read_plan(path, description)
    path.write_text(json.dumps({"orientation": "RAS", "normalization": [{"scheme": "zscore"}]}))
    with pytest.raises(ConfigError, match=r"is not a segnet plan \(it lacks configurations, configurations.2d\)"):
        read_plan(path, description)
    plan = plan_dataset(description, dataset_fingerprint(description), MODEL, Budget(1.0), CROPS_PER_VOLUME)
    path.write_text(json.dumps({**plan, "normalization": plan["normalization"] * 2}))
    with pytest.raises(ConfigError, match="plans 2 channel"):
        read_plan(path, description)
    with pytest.raises(ConfigError, match="is not a file"):
        read_plan(tmp_path / "nowhere.json", description)


def test_the_recipe_ablation_scales_the_plans_patch_and_batch():
    from omegaconf import OmegaConf

    from segnet.planning.plan import apply_plan, scaled_patch

    assert scaled_patch([96, 80], 0.5, [8, 8]) == [48, 40] and scaled_patch([96, 80], 0.3, [16, 16]) == [32, 32]
    assert scaled_patch([16, 16], 0.1, [16, 4]) == [16, 4]  # never below one stride
    with pytest.raises(ConfigError, match="data.patch_scale=1.5"):
        scaled_patch([96], 1.5, [8])
    planned = {"patch_size": [96, 80], "batch_size": 8, "samples_per_volume": 2, "crops_per_step": 16,
               "spacing": [1.0, 1.0, 0.0]}
    plan = {"configurations": {"2d": planned}, "orientation": "RAS", "normalization": []}
    model = OmegaConf.create({"channels": [8, 16, 32, 64], "strides": [2, 2, 2]})
    fields = {"spatial_dims": 2, "patch_size": None, "batch_size": None, "samples_per_volume": 2, "resample": True,
              "normalization": None, "plan": None}
    data = OmegaConf.create({**fields, "patch_scale": 0.5, "batch_scale": 0.25})
    apply_plan(data, model, plan)
    assert list(data.patch_size) == [48, 40] and data.batch_size == 2  # 16 x 0.25 crops, 2 per volume
    plain = OmegaConf.create(fields)  # without the keys: the plan's own
    apply_plan(plain, model, plan)
    assert list(plain.patch_size) == [96, 80] and plain.batch_size == 8
    with pytest.raises(ConfigError, match=r"data.batch_scale=0.0; give a positive factor"):
        apply_plan(OmegaConf.create({**fields, "batch_scale": 0.0}), model, plan)
