"""Backend ablation: equal losses across backends, a tiny sweep with its report, profiling."""

from __future__ import annotations

import json
import subprocess
import sys

import lightning as L
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from helpers import ROOT
from helpers.training import compose_config, run_train_script, tiny_overrides
from segnet.training.api import build_module, train


class LossRecorder(L.Callback):
    def __init__(self):
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def first_losses(tmp_path, backend: str, steps: int = 4) -> list[float]:
    cfg = compose_config(tiny_overrides() + [f"op={backend}"], output_dir=tmp_path)
    L.seed_everything(cfg.seed, workers=True)
    module = build_module(cfg, backend)
    recorder = LossRecorder()
    trainer = L.Trainer(
        accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[recorder], limit_val_batches=0,
    )
    trainer.fit(module, datamodule=instantiate(cfg.data))
    return recorder.losses


def test_python_and_cpp_backends_train_alike(tmp_path):
    python = first_losses(tmp_path / "python", "python")
    cpp = first_losses(tmp_path / "cpp", "cpp")
    assert len(python) == len(cpp) == 4
    for p, c in zip(python, cpp, strict=True):
        assert abs(p - c) <= 1e-4 * abs(p)


def report(sweep_dir) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ablation_report.py"), str(sweep_dir)],
        capture_output=True, text=True, timeout=300,
    )


@pytest.mark.slow
def test_tiny_sweep_and_its_report(tmp_path):
    result = run_train_script(
        ["experiment=ablation_backends", "op.backend=python,cpp", "compile=false", *tiny_overrides()], tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = tmp_path / "multirun"
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    result = report(sweep)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line for line in (sweep / "ablation.md").read_text().splitlines()
            if line.startswith("| ") and "|---" not in line]
    assert [row.split("|")[2].strip() for row in rows[1:]] == ["python", "cpp"]
    assert rows[1].split("|")[-2].strip() == "1.00x"
    assert (sweep / "ablation.png").stat().st_size > 0
    # Each row is its own run's metrics.json, and the cpp speed-up is the python run's step time
    # over the cpp run's: two files of two different runs.
    runs = {m["backend"]: (path.parent.name, m)
            for path in sorted(sweep.glob("*/metrics.json")) for m in [json.loads(path.read_text())]}
    assert sorted(runs) == ["cpp", "python"] and runs["python"][0] != runs["cpp"][0]
    python_ms = runs["python"][1]["step_time_ms_median"]
    cpp_ms = runs["cpp"][1]["step_time_ms_median"]
    cells = table_cells(rows)
    for backend, (folder, metrics) in runs.items():
        assert cells[backend][0] == folder
        assert cells[backend][3] == f"{metrics['step_time_ms_median']:.1f}"
    assert cells["cpp"][-1] == f"{python_ms / cpp_ms:.2f}x"
    # The measured times may be close enough to read 1.00x either way: with the python run's time
    # set to three times the cpp run's, the report must read 3.00x for cpp, and still 1.00x for python.
    python_metrics = sweep / runs["python"][0] / "metrics.json"
    python_metrics.write_text(json.dumps({**runs["python"][1], "step_time_ms_median": 3 * cpp_ms}))
    result = report(sweep)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = table_cells([line for line in result.stdout.splitlines() if line.startswith("| ") and "|---" not in line])
    assert cells["cpp"][3] == f"{cpp_ms:.1f}" and cells["python"][3] == f"{3 * cpp_ms:.1f}"
    assert (cells["python"][-1], cells["cpp"][-1]) == ("1.00x", "3.00x")


def table_cells(rows: list[str]) -> dict[str, list[str]]:
    """Backend -> the cells of its row in the report's table (its first row is the header)."""
    return {row.split("|")[2].strip(): [cell.strip() for cell in row.split("|")[1:-1]] for row in rows[1:]}


def fake_run(folder, backend, compile, dice=None):
    (folder / ".hydra").mkdir(parents=True)
    config = OmegaConf.create({"op": {"backend": backend}, "compile": compile})
    OmegaConf.save(config, folder / ".hydra" / "config.yaml")
    if dice is not None:
        metrics = {"backend": backend, "compile": compile,
                   "step_time_ms_median": 100.0 if backend == "python" else 25.0,
                   "samples_per_s": 10.0, "peak_memory_mb": 1000.0, "val_dice_mean": dice}
        (folder / "metrics.json").write_text(json.dumps(metrics))


def test_report_flags_failed_runs_and_diverging_dice(tmp_path):
    fake_run(tmp_path / "0", "python", False, dice=0.90)
    fake_run(tmp_path / "1", "cpp", False, dice=0.85)
    fake_run(tmp_path / "2", "cpp", True, dice=None)
    result = report(tmp_path)
    assert result.returncode == 1
    assert "| 1 | cpp | False | 25.0 | 10.0 | 1000 | 0.8500 | 4.00x |" in result.stdout
    assert "FLAG: run 1 (cpp): val Dice 0.8500 differs from python eager's 0.9000 by more than 0.02" in result.stdout
    assert "FLAG: run 2 (cpp + compile) failed" in result.stdout


def test_pytorch_profiler_trace_names_the_op(tmp_path):
    train(compose_config(tiny_overrides() + ["op=cpp", "profiler=pytorch", "data.num_train=16"], output_dir=tmp_path))
    traces = list((tmp_path / "profiler").rglob("*.pt.trace.json"))
    assert traces, f"no trace under {tmp_path / 'profiler'}: {list((tmp_path).rglob('*'))[:20]}"
    assert any("segnet_ops::edge_enhance" in t.read_text() for t in traces)
