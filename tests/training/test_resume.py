"""What last.ckpt, best.ckpt and resume guarantee: last.ckpt is the latest state and is never a
truncated file; best.ckpt is the best validation; resuming continues in the run folder with the
same best score and the same learning-rate schedule, and ends where the uninterrupted run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import ROOT
from helpers.training import FIT_PROBE, FitProbe, compose_config, run_train_script, tiny_overrides
from segnet.files import atomic_path, remove_temporaries, write_text
from segnet.training.api import train
from segnet.training.checkpoints import AtomicCheckpointIO

STEPS_PER_EPOCH = 2  # tiny 2D: 8 training images, batches of 4


def checkpoint(path):
    return torch.load(path, weights_only=True, map_location="cpu")


def run(folder, overrides):
    return train(compose_config(tiny_overrides() + ["op=cpp"] + overrides, output_dir=folder))


def test_last_is_the_end_of_training_and_best_the_best_validation(tmp_path):
    # validation after epochs 2 and 4 only: the fifth epoch ends without one
    metrics = run(tmp_path, ["trainer.max_epochs=5", "trainer.check_val_every_n_epoch=2"])
    last = checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    best = checkpoint(tmp_path / "checkpoints" / "best.ckpt")
    assert last["global_step"] == metrics["global_step"] == 5 * STEPS_PER_EPOCH
    assert best["global_step"] in (2 * STEPS_PER_EPOCH, 4 * STEPS_PER_EPOCH)
    # The fit's validations as TensorBoard has them (the final trainer.validate logs at global_step,
    # after the fit): Lightning logs each at its epoch's last optimizer step, counted from 0 like
    # the lr-* steps, so the step after it is the global_step of a checkpoint saved there.
    logged = scalars(event_files(tmp_path), "val/dice_mean")
    during_fit = {step: score for step, score in logged.items() if step < metrics["global_step"]}
    assert sorted(during_fit) == [2 * STEPS_PER_EPOCH - 1, 4 * STEPS_PER_EPOCH - 1]
    assert len(set(during_fit.values())) == 2, f"both validations scored {during_fit}: either would be the best"
    best_step = max(during_fit, key=during_fit.get)
    assert best["global_step"] == best_step + 1
    (writer,) = [state for name, state in best["callbacks"].items()  # the ModelCheckpoint that wrote best.ckpt
                 if name.startswith("ModelCheckpoint") and state["best_model_path"] == metrics["checkpoints"]["best"]]
    assert float(writer["best_model_score"]) == during_fit[best_step] == max(during_fit.values())
    assert metrics["best_val_dice_mean"] == during_fit[best_step]
    assert metrics["checkpoints"]["last"] == str(tmp_path / "checkpoints" / "last.ckpt")
    assert metrics["checkpoints"]["best"] == str(tmp_path / "checkpoints" / "best.ckpt")
    assert not list((tmp_path / "checkpoints").glob(".*tmp"))


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
        left = temporary.with_name(temporary.name.replace(".tmp", "-killed.tmp"))
        temporary.rename(left)
        temporary.write_text("second")
    assert remove_temporaries(path.parent) == [left]
    assert [p.name for p in path.parent.iterdir()] == ["case.nii.gz"] and path.read_text() == "second"


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


@pytest.mark.slow
def test_a_preempted_run_saves_at_sigterm_and_the_same_command_resumes(tmp_path):
    # No epoch-end saves (every_n_train_steps replaces them): a last.ckpt can only come from SIGTERM.
    total = 30 * STEPS_PER_EPOCH
    command = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={tmp_path}/run", *tiny_overrides(), "op=cpp",
               "trainer.max_epochs=30", "trainer.check_val_every_n_epoch=10",
               f"callbacks.last_checkpoint.every_n_train_steps={10 * total}"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list((tmp_path / "run").rglob("events.out.tfevents.*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # training has started
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=300)[1]
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert last.is_file(), stderr[-3000:]
    stopped_at = checkpoint(last)["global_step"]
    assert 0 < stopped_at < total
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)  # no ckpt_path typed
    assert again.returncode == 0, again.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["resumed_from"] == str(last) and metrics["global_step"] == total
    assert checkpoint(last)["global_step"] == total
