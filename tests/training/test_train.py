"""End-to-end training runs on tiny data: run folder, metrics.json, TensorBoard, resume, DDP."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.data import write_decathlon
from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config, run_train_script, tiny_overrides
from segnet.training.train import train

METRIC_KEYS = {
    "val_dice_mean", "best_val_dice_mean", "val_dice_per_class", "step_time_ms_median", "samples_per_s",
    "peak_memory_mb", "backend", "compile", "epochs", "global_step", "versions", "val_dice_per_case",
    "val_hd95_per_case", "val_nsd_per_case",
}


# Four levels: the decoder's half-resolution output is supervised too (1/4, next to the bottleneck, is not).
DEEPLY_SUPERVISED = ["model.channels=[4,8,16,32]", "model.strides=[2,2,2]", "model.deep_supervision=true"]


def run(tmp_path, overrides):
    return train(compose_config(overrides, output_dir=tmp_path))


def supervision_heads(run_folder) -> int:
    """How many deep-supervision heads the run's last checkpoint holds."""
    state = torch.load(run_folder / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    return len({name.split(".")[2] for name in state if name.startswith("net.supervision_heads.")})


@pytest.mark.parametrize("backend", ["python", "cpp"])
@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_tiny_run_writes_the_run_folder(tmp_path, caplog, backend, spatial_dims):
    with caplog.at_level("INFO", logger="segnet.training.train"):
        metrics = run(tmp_path, tiny_overrides(spatial_dims) + [f"op={backend}"])
    # the final line says why segnet-evaluate's Dice of the same weights is higher
    assert f"val Dice {metrics['val_dice_mean']:.4f} (best" in caplog.text
    assert "without test-time mirroring (segnet-evaluate mirrors" in caplog.text
    assert (tmp_path / "checkpoints" / "best.ckpt").is_file()
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert METRIC_KEYS <= set(written)
    assert "val_dice_postprocessed_per_case" not in written  # scored only where a run asks (below)
    assert written["backend"] == backend
    assert written["global_step"] == metrics["global_step"] > 0
    assert 0.0 <= written["val_dice_mean"] <= 1.0
    assert set(written["val_dice_per_class"]) == {"class1", "class2"}
    assert written["step_time_ms_median"] > 0 and written["samples_per_s"] > 0
    assert written["versions"]["torch"] == torch.__version__.split("+")[0]


def test_a_run_that_adds_the_postprocessing_trials_scores_every_rule_on_every_case(tmp_path):
    trials = "+callbacks.postprocessing_trials._target_=segnet.training.postprocessing_trials.PostprocessingTrials"
    metrics = run(tmp_path, tiny_overrides() + ["op=cpp", trials])
    after = metrics["val_dice_postprocessed_per_case"]
    assert set(after) == {"foreground", "classes", "foreground and classes"}
    for per_case in after.values():
        assert set(per_case) == set(metrics["val_dice_per_case"]) and len(per_case) > 0
        assert all(set(scores) == {"class1", "class2"} for scores in per_case.values())


def test_checkpoint_rebuilds_the_model_with_its_config(tmp_path):
    from segnet.training.module import SegmentationModule

    run(tmp_path, tiny_overrides() + ["op=cpp"])
    module = SegmentationModule.load_from_checkpoint(tmp_path / "checkpoints" / "last.ckpt", backend="python")
    assert module.hparams.data["num_classes"] == 3
    assert module.hparams.model["channels"] == [8, 16]
    assert len(module.net.edge_layers()) == 2  # input + one skip
    assert module.net.edge_layers()[0].backend == "python"


def test_tensorboard_has_dice_scalars_and_an_image(tmp_path):
    run(tmp_path, tiny_overrides())
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"images": 0}).Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"val/dice_mean", "val/dice_class1", "val/dice_class2", "train/loss", "train/step_time_ms"} <= scalars
    assert any(tag.startswith("lr-") for tag in scalars)
    assert "val/image_edges_prediction_label" in events.Tags()["images"]


def test_resume_continues_the_step_count(tmp_path):
    first = run(tmp_path / "first", tiny_overrides())
    steps_per_epoch = first["global_step"]
    resumed = run(
        tmp_path / "second",
        tiny_overrides() + [f"ckpt_path={tmp_path / 'first' / 'checkpoints' / 'last.ckpt'}", "trainer.max_epochs=2"],
    )
    assert resumed["global_step"] == 2 * steps_per_epoch
    assert resumed["epochs"] == 2


def test_plain_unet_has_no_edge_layers(tmp_path):
    from segnet.training.module import SegmentationModule

    run(tmp_path, tiny_overrides() + ["model.edge_placement=[]"])
    module = SegmentationModule.load_from_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert module.net.edge_layers() == []


def test_the_added_loss_terms_train_on_the_cache_and_are_logged_each(tmp_path):
    """On the device augmentation's path (the workers' is tests/preprocessing/test_maps.py's)."""
    root = write_decathlon(tmp_path / "Task", cases=3)
    run(tmp_path / "run", ["data=folder", f"data.root={root}", "data.spatial_dims=2", "data.patch_size=[16,16]",
                           "data.num_workers=0", "data.batch_size=2", "data.num_folds=3", "data.steps_per_epoch=2",
                           f"data.cache_dir={tmp_path / 'cache'}", "data.augment_on=device",
                           "loss.edge.weight=1", "loss.boundary.weight=0.01", "loss.skeleton_recall.weight=1",
                           "loss.ramp_steps=1", *TINY_MODEL, *TINY_TRAINER])
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    assert {"train/loss", "train/loss_dice_ce", "train/loss_edge", "train/loss_boundary",
            "train/loss_skeleton_recall"} <= set(events.Tags()["scalars"])
    made = {path.name.split(".")[1] for path in (tmp_path / "cache").rglob("*2d.npy")}
    assert made == {"distance2d", "skeleton2d"}  # per slice, for the 2D plan


@pytest.mark.parametrize("spatial_dims", [2, 3])
def test_decathlon_data_trains_and_validates(tmp_path, spatial_dims):
    root = write_decathlon(tmp_path / "Task", cases=3)
    patch = "[16,16]" if spatial_dims == 2 else "[16,16,16]"
    metrics = run(
        tmp_path / "run",
        ["data=folder", "data.steps_per_epoch=null", f"data.root={root}", f"data.spatial_dims={spatial_dims}",
         f"data.patch_size={patch}", "data.num_workers=0", "data.batch_size=1", "data.num_folds=3", *TINY_MODEL,
         *TINY_TRAINER],
    )
    assert set(metrics["val_dice_per_class"]) == {"core", "shell"}
    assert not math.isnan(metrics["val_dice_mean"])


def test_an_epoch_is_steps_per_epoch_batches_however_few_volumes(tmp_path):
    root = write_decathlon(tmp_path / "Task", cases=3)
    metrics = run(
        tmp_path / "run",
        ["data=folder", f"data.root={root}", "data.steps_per_epoch=5", "data.patch_size=[16,16,16]",
         "data.num_workers=0", "data.batch_size=1", "data.num_folds=3", *TINY_MODEL, *TINY_TRAINER,
         "trainer.max_epochs=2", "trainer.check_val_every_n_epoch=2"],
    )
    assert metrics["global_step"] == 10  # 2 training volumes, 5 batches an epoch
    assert 0 < metrics["validation_share_of_fit"] < 1


def test_progress_picture_is_redrawn_at_each_validation(tmp_path):
    from PIL import Image

    metrics = run(tmp_path, tiny_overrides() + ["trainer.max_epochs=3"])
    picture = Image.open(tmp_path / "progress.png")
    assert picture.format == "PNG" and picture.size == (900, 700)
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]["ProgressPlot"]
    assert [step for step, _ in last["lr"]] == list(range(metrics["global_step"]))
    assert len(last["loss"]) == metrics["global_step"]
    assert {name: len(points) for name, points in last["dice"].items()} == {"class1": 3, "class2": 3}


def test_common_trainer_options_are_accepted(tmp_path):
    metrics = run(
        tmp_path,
        tiny_overrides() + ["trainer.max_epochs=2", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
                            "trainer.accumulate_grad_batches=2", "trainer.gradient_clip_val=1.0"],
    )
    assert metrics["global_step"] == 2  # two batches an epoch, one optimizer step per two batches


def test_fast_dev_run_runs_one_batch(tmp_path):
    metrics = run(tmp_path, tiny_overrides() + ["trainer.fast_dev_run=true"])
    assert metrics["global_step"] == 1


def test_early_stopping_stops_when_validation_dice_stalls(tmp_path):
    # min_delta=1: no Dice can improve by 1, so the second validation ends the run
    metrics = run(
        tmp_path,
        tiny_overrides() + ["callbacks=early_stopping", "callbacks.early_stopping.patience=1",
                            "callbacks.early_stopping.min_delta=1.0", "trainer.max_epochs=5"],
    )
    assert metrics["epochs"] == 2


def test_a_broken_dataset_stops_training_with_every_problem_named(tmp_path):
    import nibabel as nib
    import numpy as np

    root = write_decathlon(tmp_path / "Task", cases=5)
    label_of = {name: root / "labelsTr" / f"{name}.nii.gz" for name in ("case_001", "case_002", "case_003")}
    for name, value in (("case_001", 9), ("case_002", 0.5)):
        label = np.asarray(nib.load(label_of[name]).dataobj).astype(np.float32)
        label[0, 0, 0] = value  # one voxel, in a corner a random crop may well miss
        nib.save(nib.Nifti1Image(label, np.eye(4)), str(label_of[name]))
    shifted = nib.load(label_of["case_003"])
    nib.save(nib.Nifti1Image(np.asarray(shifted.dataobj), np.diag([1.0, 1.0, 2.0, 1.0])), str(label_of["case_003"]))
    image = root / "imagesTr" / "case_004.nii.gz"
    broken = np.asarray(nib.load(image).dataobj).copy()
    broken[1, 1, 1] = np.nan
    nib.save(nib.Nifti1Image(broken, np.eye(4)), str(image))
    result = run_train_script(
        ["data=folder", "data.steps_per_epoch=null", f"data.root={root}", "data.num_workers=0",
         "data.patch_size=[16,16,16]", *TINY_MODEL, *TINY_TRAINER],
        cwd=tmp_path,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    message = result.stderr
    assert f"{root} has 4 problem(s); training does not start on a broken dataset" in message
    assert "case case_001: " in message and (
        "label values 9 are not classes of dataset.json (0 background, 1 core" in message)
    assert "case case_002: " in message and "label values 0.5 are not classes" in message
    assert "case case_003: " in message and "its affine differs from" in message
    assert "case case_004: " in message and "NaN or infinite intensities" in message
    assert "case case_000" not in message
    assert not (tmp_path / "run").exists()  # training never started: no run folder of Hydra's files alone


def test_unreadable_files_and_duplicate_cases_are_named(tmp_path):
    from segnet.data.dataset_json import describe_dataset
    from segnet.errors import DatasetError
    from segnet.planning.record import dataset_fingerprint

    root = write_decathlon(tmp_path / "Task", cases=3)
    (root / "imagesTr" / "case_001.nii.gz").write_bytes(b"not a nifti file")
    spec = json.loads((root / "dataset.json").read_text())
    spec["training"].append(spec["training"][0])
    (root / "dataset.json").write_text(json.dumps(spec))
    description = describe_dataset(str(root))
    with pytest.raises(DatasetError) as caught:
        dataset_fingerprint(description)
    assert "case case_000 is listed 2 times" in str(caught.value)
    assert "imagesTr/case_001.nii.gz: not a readable NIfTI file" in str(caught.value)  # its header, read first


@pytest.mark.slow
def test_compiled_run_matches_the_contract(tmp_path):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # no graphs, and no counts, from earlier tests of this process
    counters.clear()
    metrics = run(tmp_path, tiny_overrides() + ["op=cpp", "compile=true", *DEEPLY_SUPERVISED])
    assert metrics["compile"] is True
    assert supervision_heads(tmp_path) == 1  # trained through the compiled forward's list of outputs
    # the network went through TorchDynamo (0 graphs when compile is ignored), and its training
    # graphs, backward included, through AOTAutograd
    assert counters["stats"]["unique_graphs"] > 0 and counters["frames"]["ok"] > 0
    assert counters["aot_autograd"]["ok"] > 0
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_ddp_validation_dice_equals_the_single_process_value(tmp_path, monkeypatch):
    from segnet.metrics import mean_per_class, nanmean
    from segnet.training import module

    # 3 validation cases over 2 ranks: the sampler pads one rank with a repeated case (the seed
    # one whose cases score apart, below)
    overrides = tiny_overrides() + ["op=cpp", "data.num_val=3", "data.batch_size=2", "seed=1"]
    per_case: list[dict[str, dict[str, list[float]]]] = []  # each validation's {case: {metric: per class}}
    gather = module.gather_from_ranks

    def recording(scores):
        per_case.append(dict(scores))
        return gather(scores)

    monkeypatch.setattr(module, "gather_from_ranks", recording)
    single = run(tmp_path / "run", overrides)  # its final validation scores last.ckpt's weights
    monkeypatch.undo()
    cases = {name: scores["Dice"] for name, scores in per_case[-1].items()}
    assert len(cases) == 3 and all({"HD95", "NSD"} <= set(scores) for scores in per_case[-1].values())
    assert nanmean(mean_per_class(list(cases.values()))) == pytest.approx(single["val_dice_mean"], abs=1e-6)
    # Not vacuous: the cases score apart, so that counting any of them twice (the padded case, or
    # a mean of the ranks' means) would move the mean well past the tolerance below.
    for name, scores in cases.items():
        twice = nanmean(mean_per_class([*cases.values(), scores]))
        assert abs(twice - single["val_dice_mean"]) > 1e-3, f"case {name} counted twice leaves the mean: {cases}"
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    result = run_train_script(
        overrides + ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", f"ckpt_path={last}"], tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    distributed = json.loads((tmp_path / "run" / "metrics.json").read_text())  # the resumed run's folder
    assert distributed["resumed_from"] == str(last) and distributed["global_step"] == single["global_step"]
    assert distributed["val_dice_mean"] == pytest.approx(single["val_dice_mean"], abs=1e-6)
    assert distributed["val_dice_per_class"] == pytest.approx(single["val_dice_per_class"], abs=1e-6)


@pytest.mark.slow
def test_a_sweep_runs_through_submitit(tmp_path):
    result = run_train_script(["-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10",
                               *tiny_overrides(), "op=cpp", "seed=0,1"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = sorted((tmp_path / "multirun").glob("*/metrics.json"))
    assert [p.parent.name for p in runs] == ["0", "1"]
    assert all(json.loads(p.read_text())["global_step"] > 0 for p in runs)
    assert list((tmp_path / "multirun" / ".submitit").glob("*/*_result.pkl"))  # submitit ran the jobs


def test_ddp_on_two_cpu_processes(tmp_path):
    result = run_train_script(tiny_overrides() + ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                                                  "op=cpp", *DEEPLY_SUPERVISED], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["backend"] == "cpp"
    assert supervision_heads(tmp_path / "run") == 1  # every head in the loss: DDP finds no unused parameter
    # 8 training images over 2 ranks with batch 4: one step per epoch on each rank.
    assert metrics["global_step"] == 1
