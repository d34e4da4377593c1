"""Every step that can take more than a few seconds says what it does (segnet.progress): a
command's first line comes before it imports torch, the op's build is announced with its cache
and timed, planning, the integrity check, preprocessing and find-best show a bar with their
total, the export says its steps, and the epoch bar has the epoch's total from its first line."""

from __future__ import annotations

import fcntl
import logging
import re
import sys
import threading
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from helpers.checkpoints import MODEL_3D, run_data, write_checkpoint
from helpers.data import write_decathlon
from helpers.training import compose_config
from ops import library
from segnet import commands, progress
from segnet.data.sampling import DrawSampler
from segnet.training.epoch_bar import EpochBar


@pytest.fixture
def terminal(monkeypatch):
    """Bars drawn as on a terminal (the tests' stderr is a capture, where they are not)."""
    monkeypatch.setattr(progress, "on_terminal", lambda: True)


def said(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_a_command_says_what_starts_before_its_check_and_its_work_are_imported(tmp_path, monkeypatch, caplog):
    seen = []  # each import of a check or work, with the lines said by then
    monkeypatch.setattr(commands, "imported", lambda name: lambda cfg: seen.append((name, said(caplog))))
    monkeypatch.setattr(sys, "argv", ["segnet-plan", f"hydra.run.dir={tmp_path}", "hydra.output_subdir=null",
                                      "hydra/job_logging=none", "hydra/hydra_logging=none"])
    with caplog.at_level(logging.INFO, logger="segnet"):
        commands.hydra_command("segnet-plan", "plan", "some.work:run", "", (), "some.check:run")()
    first = "segnet-plan: loading torch and its libraries (a few seconds; longer on a cold disk) ..."
    assert seen == [("some.check:run", [first]), ("some.work:run", [first])]


def test_the_op_build_is_announced_with_its_cache_and_timed_and_a_cached_load_says_nothing(
        tmp_path, monkeypatch, caplog):
    class Compiler:  # torch's cpp_extension, without the minute of compiling
        def load(self, name, build_directory, **_):
            Path(build_directory, f"{name}.so").write_bytes(b"")

    monkeypatch.setattr(library, "_cpp_extension", Compiler)
    monkeypatch.setattr(library, "_require_compiler", lambda: None)
    monkeypatch.setattr(torch.ops, "load_library", lambda path: None)
    monkeypatch.setenv("SEGNET_OPS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "op.cpp").write_text("")
    with caplog.at_level(logging.INFO, logger="ops.library"):
        built = library.build("segnet_ops_cpu", tmp_path / "src", ("op.cpp",), ("-O3",))
        assert said(caplog) == [
            f"building the C++ edge op (once per torch version and source change; one to two minutes on 2 cores) "
            f"into {built.path.parent} ...", "built segnet_ops_cpu in 0 s"]
        caplog.clear()
        library.build("segnet_ops_cpu", tmp_path / "src", ("op.cpp",), ("-O3",))  # found in the cache
        assert said(caplog) == []


def slow_compiler(seconds: float):
    class Compiler:  # torch's cpp_extension, compiling for `seconds`
        def load(self, name, build_directory, **_):
            time.sleep(seconds)
            Path(build_directory, f"{name}.so").write_bytes(b"")
    return Compiler


@pytest.fixture
def fake_build(tmp_path, monkeypatch):
    """library.build's arguments for a source folder whose compiler is faked (monkeypatch it)."""
    monkeypatch.setattr(library, "_require_compiler", lambda: None)
    monkeypatch.setattr(torch.ops, "load_library", lambda path: None)
    monkeypatch.setenv("SEGNET_OPS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "op.cpp").write_text("")
    return "segnet_ops_cpu", tmp_path / "src", ("op.cpp",), ("-O3",)


def test_a_build_still_compiling_says_its_elapsed_time_until_it_ends(fake_build, monkeypatch, caplog):
    monkeypatch.setattr(library, "_cpp_extension", slow_compiler(0.5))
    monkeypatch.setattr(library, "LINE_SECONDS", 0.1)
    with caplog.at_level(logging.INFO, logger="ops.library"):
        library.build(*fake_build)
    ticks = [line for line in said(caplog) if line.startswith("still building segnet_ops_cpu: ")]
    assert 3 <= len(ticks) <= 5
    assert said(caplog)[-1].startswith("built segnet_ops_cpu in ")  # no tick after the build ended


def test_a_process_waiting_on_anothers_build_says_so(fake_build, monkeypatch, caplog):
    monkeypatch.setattr(library, "_cpp_extension", slow_compiler(0))
    folder = library.build_folder(*fake_build[:2], fake_build[3])
    folder.mkdir(parents=True)
    with open(folder / "segnet-build.lock", "a") as held, caplog.at_level(logging.INFO, logger="ops.library"):
        fcntl.flock(held, fcntl.LOCK_EX)  # another process's build
        builder = threading.Thread(target=library.build, args=fake_build)
        builder.start()
        time.sleep(0.3)
        assert said(caplog) == [f"waiting for another process building or loading in {folder} ..."]
        fcntl.flock(held, fcntl.LOCK_UN)
        builder.join(10)
    assert said(caplog)[-1].startswith("built segnet_ops_cpu in ")


def test_planning_and_the_integrity_check_show_their_cases_out_of_the_total(tmp_path, terminal, capsys, caplog):
    from segnet.planning.plan import plan_command

    root = write_decathlon(tmp_path / "Task", cases=3)
    with caplog.at_level(logging.INFO):
        plan_command(compose_config([f"data.root={root}", "verify=true", f"data.cache_dir={tmp_path}/cache"],
                                    name="plan"))
    assert f"fingerprint and integrity check of 3 of 3 case(s) of {root}" in said(caplog)
    assert re.search(r"checking: 100%\|\S+\| 3/3 ", capsys.readouterr().err)


def test_preprocessing_shows_its_cases_out_of_the_total(tmp_path, terminal, capsys):
    from segnet.data.dataset_json import describe_dataset
    from segnet.preprocessing.preprocess import preprocess

    description = describe_dataset(str(write_decathlon(tmp_path / "Task", cases=2)))
    geometry = {"orientation": "RAS", "spacing": [1.5, 1.5, 1.5], "normalization": None}
    preprocess(description, description.labelled, geometry, str(tmp_path / "cache"))
    assert re.search(r"preprocessing: 100%\|\S+\| 2/2 ", capsys.readouterr().err)


def test_find_best_says_each_run_out_of_the_runs_and_shows_its_cases(tmp_path, terminal, capsys, caplog):
    from segnet.postprocessing.find_best import find_best_command

    root = write_decathlon(tmp_path / "Task", cases=4)  # 2 folds of 2 validation cases
    runs = [tmp_path / f"fold{fold}" for fold in (0, 1)]
    for fold, run in enumerate(runs):
        write_checkpoint(run / "checkpoints" / "final.ckpt", MODEL_3D, {**run_data(), "fold": fold}, seed=fold)
    with caplog.at_level(logging.INFO, logger="segnet"):
        find_best_command(compose_config([f"data.root={root}", f"runs=[{runs[0]},{runs[1]}]", "tta=false",
                                          "op=python", "device=cpu"], output_dir=tmp_path / "best", name="find_best"))
    lines = said(caplog)
    for fold in (0, 1):
        assert f"3d fold {fold}: predicting its validation cases ({fold + 1}/2) ..." in lines
        assert any(line.startswith(f"3d fold {fold}: predicting its validation cases ({fold + 1}/2): done in ")
                   for line in lines)
    assert "scoring 4 case(s) under 1 candidate(s)" in lines
    bars = capsys.readouterr().err
    assert len(re.findall(r"predicting: +0%\|[^|]*\| 0/2 ", bars)) == 2  # a bar per run
    assert re.search(r"predicting: 100%\|\S+\| 2/2 ", bars)
    assert re.search(r"scoring: 100%\|\S+\| 4/4 ", bars)


def test_the_export_says_each_step_out_of_its_steps(trained_2d, tmp_path, caplog):
    from segnet.export.exporter import export_network
    from segnet.inference.loading import load_for_inference

    model = load_for_inference(trained_2d.checkpoint, "cpu", "cpp")
    with caplog.at_level(logging.INFO, logger="segnet"):
        export_network(model, tmp_path / "model.pt2", "exported_program")
    steps = [re.sub(r"done in [0-9.]+ s", "done in N s", line) for line in said(caplog)]
    assert steps == ["torch.export of the network (1/2) ...", "torch.export of the network (1/2): done in N s",
                     "saving it (2/2) ...", "saving it (2/2): done in N s"]


class Tiny(L.LightningModule):
    """One weight, a step per batch of draws: the bar's lines are the test's subject, not training."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return (self.weight - 1).square().sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Indices(Dataset):
    def __len__(self) -> int:
        return 5

    def __getitem__(self, draw) -> torch.Tensor:
        return torch.tensor(float(draw.index))


def bar_lines(capsys, bar: EpochBar, steps_per_epoch: int, batch_size: int = 2) -> list[str]:
    """The epoch bar's states as one epoch of segnet's draws (steps_per_epoch batches) draws them."""
    draws = DrawSampler(5, batch_size, steps_per_epoch * batch_size, seed=0)
    loader = DataLoader(Indices(), batch_size=batch_size, sampler=draws)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_model_summary=False, callbacks=[bar])
    capsys.readouterr()
    trainer.fit(Tiny(), loader)
    return [line.strip() for line in re.split(r"[\r\n]", capsys.readouterr().out) if line.strip()]


def test_the_epoch_bar_shows_the_steps_per_epoch_from_its_first_line(capsys):
    assert compose_config([]).callbacks.progress_bar._target_ == "segnet.training.epoch_bar.EpochBar"  # training's
    lines = bar_lines(capsys, EpochBar(refresh_rate=100, seconds=1000), steps_per_epoch=3)
    assert lines[0].startswith("Epoch 0:   0%|") and " 0/3 " in lines[0]
    assert not any("/?" in line for line in lines)  # Lightning's own first line: "Training: 0/?"
    assert not any(" 1/3 " in line or " 2/3 " in line for line in lines)  # neither 100 batches nor 1000 s passed
    assert any(" 3/3 " in line for line in lines)


def test_the_epoch_bar_is_redrawn_once_its_seconds_passed_between_refresh_rate_batches(capsys):
    lines = bar_lines(capsys, EpochBar(refresh_rate=100, seconds=0), steps_per_epoch=3)
    assert all(any(f" {n}/3 " in line for line in lines) for n in (1, 2, 3))
