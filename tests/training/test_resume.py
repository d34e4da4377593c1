"""What last.ckpt, best.ckpt and resume guarantee: last.ckpt is the latest state and is never a
truncated file; best.ckpt is the best validation; resuming continues in the run folder with the
same best score and the same learning-rate schedule, and ends where the uninterrupted run ends."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import ROOT
from helpers.data import write_decathlon
from helpers.logs import noise
from helpers.stops import process_group, signal_at, step_file, wait_for_step
from helpers.training import (
    FIT_PROBE,
    TINY_MODEL,
    TINY_TRAINER,
    FitProbe,
    batch_log,
    compose_config,
    read_batch_logs,
    run_train_script,
    tiny_overrides,
)
from segnet.checkpoints.writing import AtomicCheckpointIO
from segnet.errors import ConfigError
from segnet.files import atomic_path, remove_temporaries, temporary_beside, write_text
from segnet.training.signals import SIGNAL_NAMES
from segnet.training.train import train

STEPS_PER_EPOCH = 2  # tiny 2D: 8 training images, batches of 4


def checkpoint(path):
    return torch.load(path, weights_only=True, map_location="cpu")


def run(folder, overrides):
    return train(compose_config(tiny_overrides() + ["op=cpp"] + overrides, output_dir=folder))


def test_last_is_the_end_of_training_and_best_the_best_of_every_validation_the_final_one_included(tmp_path):
    # validation after epochs 2 and 4 only: the fifth epoch ends without one, so only the final
    # validation scores the final weights
    metrics = run(tmp_path, ["trainer.max_epochs=5", "trainer.check_val_every_n_epoch=2"])
    folder = tmp_path / "checkpoints"
    last, best, final = (checkpoint(folder / f"{name}.ckpt") for name in ("last", "best", "final"))
    assert last["global_step"] == final["global_step"] == metrics["global_step"] == 5 * STEPS_PER_EPOCH
    assert "optimizer_states" not in final and final["hyper_parameters"] == last["hyper_parameters"]
    assert all(torch.equal(final["state_dict"][k], last["state_dict"][k]) for k in last["state_dict"])
    # Every validation as TensorBoard has it: Lightning logs the fit's at their epoch's last
    # optimizer step, counted from 0 like the lr-* steps, so the step after it is the global_step
    # of a checkpoint saved there; the final trainer.validate logs at global_step.
    logged = scalars(event_files(tmp_path), "val/dice_mean")
    scores = {step + 1: score for step, score in logged.items() if step < metrics["global_step"]}
    assert sorted(scores) == [2 * STEPS_PER_EPOCH, 4 * STEPS_PER_EPOCH]
    scores[metrics["global_step"]] = metrics["val_dice_mean"]
    assert len(set(scores.values())) == 3, f"validations tied at {scores}: any could be the best"
    best_step = max(scores, key=scores.get)
    assert best_step == metrics["global_step"], f"this seed's final weights should score best: {scores}"
    assert best["global_step"] == best_step == metrics["best_checkpoint"]["step"]
    (writer,) = [state for name, state in best["callbacks"].items()  # the ModelCheckpoint that wrote best.ckpt
                 if name.startswith("ModelCheckpoint") and state["best_model_path"] == metrics["checkpoints"]["best"]]
    assert float(writer["best_model_score"]) == pytest.approx(scores[best_step]) == metrics["best_val_dice_mean"]
    assert "optimistic" in metrics["best_checkpoint"]["selection"]
    (known,) = [state for name, state in last["callbacks"].items()  # what a resume from last.ckpt compares with
                if name.startswith("ModelCheckpoint") and state["monitor"] == "val/dice_mean"]
    assert float(known["best_model_score"]) == pytest.approx(metrics["best_val_dice_mean"])
    assert metrics["scored"] == {"checkpoint": str(folder / "final.ckpt"), "step": metrics["global_step"],
                                 "tta": False, "postprocessing": "none"}
    assert metrics["checkpoints"] == {name: str(folder / f"{name}.ckpt") for name in ("final", "best", "last")}
    assert not list(folder.glob(".*tmp"))


def test_last_is_written_every_n_steps_and_at_a_step_limit(tmp_path):
    run(tmp_path, ["callbacks.last_checkpoint.every_n_train_steps=2", "trainer.max_epochs=3", "trainer.max_steps=3"])
    assert checkpoint(tmp_path / "checkpoints" / "last.ckpt")["global_step"] == 3  # mid-epoch


class FailsWhilePickled:
    def __reduce__(self):
        raise RuntimeError("disk full")


def test_a_failed_write_leaves_the_previous_checkpoint_whole(tmp_path):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": torch.tensor(1)}, path)
    with pytest.raises(RuntimeError, match="disk full"):
        io.save_checkpoint({"step": torch.tensor(2), "bad": FailsWhilePickled()}, path)
    assert checkpoint(path)["step"].item() == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_failed_write_of_any_run_file_leaves_the_previous_one_whole(tmp_path):
    path = tmp_path / "labels" / "case.nii.gz"
    write_text(path, "first")
    with pytest.raises(RuntimeError, match="disk full"), atomic_path(path) as temporary:
        assert temporary.name.endswith(".nii.gz") and temporary.parent == path.parent  # same format, same disk
        temporary.write_text("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "first"
    assert [p.name for p in path.parent.iterdir()] == ["case.nii.gz"]
    with atomic_path(path) as temporary:  # a writer killed here leaves its temporary behind
        temporary.write_text("half")
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout.strip()  # a process that has ended
        left = temporary.with_name(temporary.name.replace(f"~{os.getpid()}~", f"~{dead}~"))
        temporary.rename(left)
        temporary.write_text("second")
    # what live writers hold stays: this process's (another part predicting into the folder), and
    # another host's, whose processes nothing here can see
    live, elsewhere = temporary_beside(path), path.with_name(".case.otherhost~1~1.tmp.nii.gz")
    live.write_text("another part's")
    elsewhere.write_text("another node's")
    assert remove_temporaries(path.parent) == [left]
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(["case.nii.gz", live.name, elsewhere.name])
    assert path.read_text() == "second"


def event_files(run_folder) -> list:
    """The run folder's TensorBoard event files, oldest first (each process, and each trainer.fit or
    trainer.validate of one, starts a new one)."""
    return sorted(run_folder.rglob("events.out.tfevents.*"), key=lambda p: (p.stat().st_mtime_ns, p.name))


def scalars(files, prefix: str) -> dict[int, float]:
    """Step -> value of the scalars whose tag starts with prefix, in these event files alone."""
    values = {}
    for events in files:
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            if tag.startswith(prefix):
                values.update({e.step: e.value for e in accumulator.Scalars(tag)})
    return values


def learning_rates(run_folder) -> dict[int, float]:
    """Step -> learning rate, over every TensorBoard version of the run (a resume adds one)."""
    rates = {}
    for events in sorted(run_folder.rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events.parent))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            if tag.startswith("lr-"):
                rates.update({e.step: e.value for e in accumulator.Scalars(tag)})
    return rates


@pytest.mark.slow
def test_resumed_run_equals_the_uninterrupted_one(tmp_path):
    exact = ["trainer.deterministic=true", "trainer.check_val_every_n_epoch=1", "callbacks.step_timer.skip=0"]
    whole = run(tmp_path / "whole", exact + ["trainer.max_epochs=2"])
    # the same two-epoch schedule, stopped after one epoch, then resumed for the second
    first = run(tmp_path / "parts", exact + ["trainer.max_epochs=1", f"optim.schedule_steps={2 * STEPS_PER_EPOCH}"])
    last = tmp_path / "parts" / "checkpoints" / "last.ckpt"
    stopped = checkpoint(last)  # before the resumed fit writes over it
    written_before = set(event_files(tmp_path / "parts"))
    FitProbe.made.clear()
    resumed = train(compose_config(
        tiny_overrides() + ["op=cpp", *exact, "trainer.max_epochs=2", f"ckpt_path={last}", FIT_PROBE],
        output_dir=tmp_path / "elsewhere",
    ))
    assert first["global_step"] == STEPS_PER_EPOCH and resumed["global_step"] == whole["global_step"]
    # a resume, not a restart: the resumed fit started from the checkpoint's step and weights ...
    (probe,) = FitProbe.made
    assert stopped["global_step"] == STEPS_PER_EPOCH
    assert probe.start_step == stopped["global_step"]
    assert probe.start_state.keys() == stopped["state_dict"].keys()
    assert all(torch.equal(probe.start_state[k], stopped["state_dict"][k]) for k in probe.start_state)
    # ... and ran only the remaining optimizer steps, logging those steps alone
    assert probe.batches == whole["global_step"] - stopped["global_step"] == STEPS_PER_EPOCH
    written_by_resume = [f for f in event_files(tmp_path / "parts") if f not in written_before]
    remaining = list(range(STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH))
    assert sorted(scalars(written_by_resume, "lr-")) == remaining
    assert sorted(scalars(written_by_resume, "train/step_time_ms")) == remaining
    assert not (tmp_path / "elsewhere" / "checkpoints").exists()  # it continued in its run folder
    a = checkpoint(tmp_path / "whole" / "checkpoints" / "last.ckpt")
    b = checkpoint(last)
    assert a["state_dict"].keys() == b["state_dict"].keys()
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    assert learning_rates(tmp_path / "whole") == learning_rates(tmp_path / "parts")
    assert len(learning_rates(tmp_path / "whole")) == 2 * STEPS_PER_EPOCH
    # the best score survives the resume: the better of the two validations, as without a stop
    assert resumed["best_val_dice_mean"] == max(first["val_dice_mean"], resumed["val_dice_mean"])
    assert resumed["best_val_dice_mean"] == whole["best_val_dice_mean"]


@pytest.mark.slow
def test_resuming_with_more_epochs_keeps_the_schedule(tmp_path):
    run(tmp_path, ["trainer.max_epochs=1"])
    rates = learning_rates(tmp_path)
    last = tmp_path / "checkpoints" / "last.ckpt"
    train(compose_config(tiny_overrides() + ["op=cpp", "trainer.max_epochs=2", f"ckpt_path={last}"],
                         output_dir=tmp_path))
    extended = learning_rates(tmp_path)
    # the first fit's schedule ended at its floor; a longer resume stays there instead of jumping back up
    assert extended[STEPS_PER_EPOCH] <= rates[STEPS_PER_EPOCH - 1]
    (schedule,) = checkpoint(tmp_path / "checkpoints" / "last.ckpt")["lr_schedulers"]
    assert schedule["_milestones"][-1] == STEPS_PER_EPOCH  # the end of the cosine: the first fit's


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_same_end(tmp_path):
    args = tiny_overrides() + ["op=cpp", "trainer.max_epochs=30", "trainer.check_val_every_n_epoch=10"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"}
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={tmp_path}/run", *args],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 300
    while not last.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert last.exists(), "the run ended or timed out before its first checkpoint"
    killed_at = checkpoint(last)["global_step"]  # readable: never truncated
    assert killed_at < 30 * STEPS_PER_EPOCH
    (tmp_path / "again").mkdir()
    result = run_train_script(args + [f"ckpt_path={last}"], cwd=tmp_path / "again")
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["global_step"] == 30 * STEPS_PER_EPOCH
    assert checkpoint(last)["global_step"] == 30 * STEPS_PER_EPOCH


def answers_ctrl_c() -> None:
    """In the run's process before it starts: SIGINT as a terminal's foreground job gets it, not
    ignored as by a job the shell (or a CI runner) started in the background."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("stop,status", [(signal.SIGTERM, 0), (signal.SIGINT, 128 + signal.SIGINT)])
def test_a_stop_to_the_process_group_saves_the_step_in_progress_and_the_same_command_resumes(tmp_path, stop, status):
    # As timeout, scancel, a preemption or Ctrl-C stop a run: the signal to its whole process group,
    # DataLoader workers included. No epoch-end saves (every_n_train_steps replaces them): a
    # last.ckpt can only come from the stop.
    total = 10 * STEPS_PER_EPOCH
    command = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={tmp_path}/run", *tiny_overrides(), "op=cpp",
               "data.num_workers=1", "trainer.max_epochs=10", "trainer.check_val_every_n_epoch=5",
               f"callbacks.last_checkpoint.every_n_train_steps={10 * total}", *step_file(tmp_path / "step")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "HYDRA_FULL_ERROR": "0"}
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, preexec_fn=answers_ctrl_c)
    trained = wait_for_step(tmp_path / "step", 3, process)
    assert len(process_group(process.pid)) > 1, "no DataLoader worker in the process group to signal"
    os.killpg(process.pid, stop)
    output = "".join(process.communicate(timeout=300))
    assert process.returncode == status, output[-3000:]
    assert "Traceback" not in output and not process_group(process.pid, within=30)  # the workers ended with it
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    said = re.escape(SIGNAL_NAMES[stop])
    hint = rf"Stopped by {said} at step (\d+): {re.escape(str(last))} saved; run the same command to resume$"
    (hinted,) = re.findall(hint, output, re.MULTILINE)  # said once, and nothing else said of the stop
    assert noise(output) == []
    stopped_at = checkpoint(last)["global_step"]
    assert stopped_at == int(hinted) and trained <= stopped_at < total  # no step trained before the stop is lost
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert noise(again.stdout + again.stderr) == [] and "resumable" not in again.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["resumed_from"] == str(last) and metrics["global_step"] == total
    assert checkpoint(last)["global_step"] == total
    # Lightning logs this when a checkpoint is *saved* without saying whether whole or weights only
    assert "`weights_only` was not set" not in output + again.stdout + again.stderr


def validations(run_folder) -> dict[int, float]:
    """The step of the checkpoint each validation scored (see the first test) -> its mean Dice,
    over every TensorBoard file of the run (a resume adds some)."""
    return {step + 1: score for step, score in scalars(event_files(run_folder), "val/dice_mean").items()}


@pytest.mark.parametrize("settings,stop", [
    ([], signal_at("SIGTERM", 2 * STEPS_PER_EPOCH, "validation")),  # in the middle of the second validation
    (["callbacks.last_checkpoint.every_n_train_steps=3"],  # mid-epoch, between periodic saves
     signal_at("SIGTERM", 2 * STEPS_PER_EPOCH + 1, "training")),
])
def test_a_resumed_run_validates_at_the_steps_of_the_uninterrupted_one(tmp_path, settings, stop):
    schedule = ["trainer.max_epochs=3", "data.num_val=8", *settings]  # 2 validation batches an epoch
    whole = run(tmp_path / "whole", schedule)
    with pytest.raises(SystemExit):
        run(tmp_path / "parts", schedule + stop)
    resumed = run(tmp_path / "parts", schedule)
    assert sorted(validations(tmp_path / "whole")) == [2, 4, 6, 7]  # every epoch, and the final validation
    assert validations(tmp_path / "parts") == pytest.approx(validations(tmp_path / "whole"), abs=1e-5)
    assert resumed["global_step"] == whole["global_step"] and resumed["validation_seconds"] > 0


def test_a_resume_reads_every_checkpoint_weights_only(tmp_path, monkeypatch):
    run(tmp_path, ["trainer.max_epochs=1"])
    read_as, load = [], torch.load

    def recorded(*args, **kwargs):
        read_as.append(kwargs.get("weights_only"))
        return load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recorded)
    assert run(tmp_path, ["trainer.max_epochs=2"])["resumed_from"] == str(tmp_path / "checkpoints" / "last.ckpt")
    # the configuration check, Lightning's restore of the fit, the final validation's weights, ...
    assert len(read_as) >= 3 and set(read_as) == {True}, read_as


def tiny_dataset_run(root, *overrides: str) -> list[str]:
    """A tiny 2D training on a dataset folder: 2 batches of 2 volumes per epoch, no workers."""
    return ["data=folder", f"data.root={root}", "data.num_folds=3", "data.num_workers=0", "data.spatial_dims=2",
            "data.patch_size=[16,16]", "data.batch_size=2", "data.steps_per_epoch=2", "op=cpp", *TINY_MODEL,
            *TINY_TRAINER, *overrides]


@pytest.mark.slow
@pytest.mark.parametrize("augment_on,stop", [
    ("workers", ["trainer.max_epochs=1"]),  # at an epoch's end
    ("device", ["trainer.max_epochs=2", "trainer.max_steps=3", "callbacks.last_checkpoint.every_n_train_steps=3"]),
])  # ... or in the middle of the second epoch, as a preemption's checkpoint is
def test_a_resumed_run_draws_on_instead_of_again(tmp_path, augment_on, stop):
    # MONAI's DataLoader once rewound torch's generator when num_workers=0: a resumed epoch was epoch 0
    root = write_decathlon(tmp_path / "Task", cases=3)
    common = [f"data.augment_on={augment_on}", "optim.schedule_steps=4"]
    train(compose_config(tiny_dataset_run(root, *common, "trainer.max_epochs=2", *batch_log(tmp_path / "whole")),
                         output_dir=tmp_path / "whole"))
    taken = train(compose_config(tiny_dataset_run(root, *common, *stop), output_dir=tmp_path / "parts"))["global_step"]
    resumed = tiny_dataset_run(root, *common, "trainer.max_epochs=2", *batch_log(tmp_path / "resumed"),
                               f"ckpt_path={tmp_path / 'parts' / 'checkpoints' / 'last.ckpt'}")
    train(compose_config(resumed, output_dir=tmp_path / "parts"))
    ((whole,), (rest,)) = (read_batch_logs(tmp_path / f) for f in ("whole", "resumed"))
    assert len(whole["batches"]) == 4 and rest["global_step"] == 4 and taken == (3 if augment_on == "device" else 2)
    assert rest["batches"] == whole["batches"][taken:]  # the crops and augmentation that came next, bit for bit
    assert rest["batches"] != whole["batches"][: 4 - taken]


def test_auto_resumes_only_a_checkpoint_of_the_same_run(tmp_path):
    root = write_decathlon(tmp_path / "Task", cases=3)
    run = tmp_path / "run"
    train(compose_config(tiny_dataset_run(root, "data.fold=0"), output_dir=run))
    recorded = {name: (run / name).read_text() for name in ("plans.json", "splits.json")}
    with pytest.raises(ConfigError, match=r"another configuration \(data\.fold: 0 there, 1 now\).*new "
                                          r"hydra\.run\.dir, or ckpt_path=null"):
        train(compose_config(tiny_dataset_run(root, "data.fold=1"), output_dir=run))  # a reused run folder
    assert {name: (run / name).read_text() for name in recorded} == recorded  # nothing written over
    FitProbe.made.clear()
    metrics = train(compose_config(tiny_dataset_run(root, "data.fold=1", "ckpt_path=null", FIT_PROBE),
                                   output_dir=run))
    assert FitProbe.made[0].start_step == 0 and metrics["resumed_from"] is None  # afresh, as asked
    assert json.loads((run / "splits.json").read_text())["fold"] == 1


def slurm_job(monkeypatch) -> None:
    """This process as the one task of a SLURM job (what Lightning's SLURMEnvironment detects)."""
    for name, value in {"SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_PROCID": "0",
                        "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "1", "SLURM_JOB_ID": "4242",
                        "SLURM_JOB_NAME": "segnet-test", "SLURM_NODELIST": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)


def test_under_slurm_the_final_validation_scores_the_final_weights(tmp_path, monkeypatch):
    slurm_job(monkeypatch)
    run(tmp_path, ["trainer.max_epochs=1"])
    preempted = tmp_path / "hpc_ckpt_1.ckpt"  # as Lightning's requeue writes it at SLURM's warning signal
    shutil.copy(tmp_path / "checkpoints" / "last.ckpt", preempted)
    FitProbe.made.clear()
    metrics = run(tmp_path, ["trainer.max_epochs=2", f"optim.schedule_steps={2 * STEPS_PER_EPOCH}", FIT_PROBE])
    assert metrics["resumed_from"] == str(preempted) and metrics["global_step"] == 2 * STEPS_PER_EPOCH
    final = checkpoint(tmp_path / "checkpoints" / "last.ckpt")["state_dict"]
    scored = FitProbe.made[0].validated_state
    assert scored.keys() == final.keys() and all(torch.equal(scored[k], final[k]) for k in final)
    assert not all(torch.equal(scored[k], checkpoint(preempted)["state_dict"][k]) for k in final)
    with pytest.raises(ConfigError, match=r"ckpt_path=null, but .* holds hpc_ckpt_1\.ckpt .*ckpt_path=auto"):
        run(tmp_path, ["ckpt_path=null"])  # Lightning would resume it by itself


def test_a_fit_that_never_validated_keeps_its_final_weights_as_best(tmp_path):
    metrics = run(tmp_path, ["trainer.max_epochs=2", "trainer.check_val_every_n_epoch=5"])
    best, last = (checkpoint(tmp_path / "checkpoints" / f"{name}.ckpt") for name in ("best", "last"))
    assert metrics["best_val_dice_mean"] == metrics["val_dice_mean"] > 0
    assert metrics["checkpoints"]["best"] == str(tmp_path / "checkpoints" / "best.ckpt")
    assert best["global_step"] == last["global_step"] == metrics["global_step"]
    assert all(torch.equal(best["state_dict"][k], last["state_dict"][k]) for k in last["state_dict"])


def test_a_run_of_an_older_segnet_resumes_without_its_configuration_recorded():
    from segnet.training.resume import differences

    sections = {"model": {"channels": [8, 16]}, "optim": {"lr": 0.001}, "loss": {"dice_ce": {"weight": 1.0}},
                "inference": {"overlap": 0.5}}
    older = {**sections, "data": {"spatial_dims": 3, "plan": {"orientation": "RAS"}}}
    now = {**sections, "data": {"spatial_dims": 3, "plan": {"orientation": "RAS"}, "configuration": "3d"}}
    assert differences(older, now) == []  # the configuration it trained was its spatial dims'
    lowres = {**sections, "data": {**now["data"], "configuration": "3d_lowres"}}
    assert differences(older, lowres) == ["data.configuration: 3d there, 3d_lowres now"]


def test_a_run_from_before_the_stem_the_crop_and_the_share_were_settings_resumes_as_it_trained():
    from segnet.training.resume import differences

    sections = {"optim": {"lr": 0.001}, "loss": {"dice_ce": {"weight": 1.0}}, "inference": {"overlap": 0.5}}
    older = {**sections, "model": {"channels": [8, 16]}, "data": {"spatial_dims": 2, "configuration": "2d"}}
    now = {**sections, "model": {"channels": [8, 16], "stem": "residual"},
           "data": {"spatial_dims": 2, "configuration": "2d", "crop": "none", "foreground_share": 2 / 3}}
    assert differences(older, now) == []
    changed = {**now, "model": {**now["model"], "stem": "conv"}, "data": {**now["data"], "crop": "body"}}
    assert differences(older, changed) == ["data.crop: none there, body now", "model.stem: residual there, conv now"]
