"""Backend ablation: equal losses across backends, a tiny sweep with its report, the accuracy check
on constructed sweeps, profiling."""

from __future__ import annotations

import json
import subprocess

import lightning as L
import numpy as np
import pytest

from helpers.sweeps import csv_rows, run_report, write_hydra, write_run
from helpers.training import compose_config, run_train_script, tiny_overrides
from segnet.training.train import build_module, instantiate_data, train


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
    trainer.fit(module, datamodule=instantiate_data(cfg.data))
    return recorder.losses


def test_python_and_cpp_backends_train_alike(tmp_path):
    python = first_losses(tmp_path / "python", "python")
    cpp = first_losses(tmp_path / "cpp", "cpp")
    assert len(python) == len(cpp) == 4
    for p, c in zip(python, cpp, strict=True):
        assert abs(p - c) <= 1e-4 * abs(p)


def report(sweep_dir, *args: str) -> subprocess.CompletedProcess:
    return run_report(sweep_dir, *args)


@pytest.mark.slow
def test_tiny_sweep_and_its_report(tmp_path):
    result = run_train_script(
        ["experiment=ablation_backends", "op.backend=python,cpp", "compile=false", "seed=0", *tiny_overrides()],
        tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = tmp_path / "multirun"
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    result = report(sweep)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = runs_table((sweep / "ablation.md").read_text())
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
        assert cells[backend][4] == f"{metrics['step_time_ms_median']:.1f}"
    assert cells["cpp"][-1] == f"{python_ms / cpp_ms:.2f}x"
    # The measured times may be close enough to read 1.00x either way: with the python run's time
    # set to three times the cpp run's, the report must read 3.00x for cpp, and still 1.00x for python.
    python_metrics = sweep / runs["python"][0] / "metrics.json"
    python_metrics.write_text(json.dumps({**runs["python"][1], "step_time_ms_median": 3 * cpp_ms}))
    result = report(sweep)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = table_cells(runs_table(result.stdout))
    assert cells["cpp"][4] == f"{cpp_ms:.1f}" and cells["python"][4] == f"{3 * cpp_ms:.1f}"
    assert (cells["python"][-1], cells["cpp"][-1]) == ("1.00x", "3.00x")


def table_cells(rows: list[str]) -> dict[str, list[str]]:
    """Backend -> the cells of its row in the report's table of runs (its first row is the header)."""
    return {row.split("|")[2].strip(): [cell.strip() for cell in row.split("|")[1:-1]] for row in rows[1:]}


def runs_table(text: str) -> list[str]:
    """The rows of the report's first table, the runs of a backend sweep."""
    block = text.split("\n\n")[1]
    return [line for line in block.splitlines() if line.startswith("| ") and "|---" not in line]


def backend_sweep(folder, backends: dict[str, dict[str, float] | None], seeds=(0, 1, 2)) -> None:
    """Runs of each backend label ("cpp + compile": compile=true) per seed, each with the per-case Dice
    given (None: the run failed); the python runs score each case with a seed-to-seed spread of 0.02."""
    rng = np.random.default_rng(0)
    for seed in seeds:
        noise = {case: float(rng.normal(0, 0.02)) for case in next(d for d in backends.values() if d)}
        for label, dice in backends.items():
            backend, _, compiled = label.partition(" + ")
            run = folder / f"{label.replace(' + ', '_')}_{seed}"
            config = {"op": {"backend": backend}, "compile": bool(compiled), "seed": seed}
            if dice is None:
                write_hydra(run, {"op": backend}, config)
                continue
            scores = {case: value + noise[case] for case, value in dice.items()}
            write_run(run, {"op": backend}, config, {"Dice": scores}, backend=backend, compile=bool(compiled),
                      step_time_ms_median=100.0 if backend == "python" else 25.0, samples_per_s=10.0,
                      peak_memory_mb=1000.0, val_dice_mean=float(np.mean(list(scores.values()))))


def test_a_backend_moving_cases_by_more_than_the_seed_spread_fails_and_a_copy_passes(tmp_path):
    cases = {f"case_{i}": 0.6 + 0.01 * i for i in range(20)}
    rng = np.random.default_rng(1)
    planted = {case: value + float(rng.choice([-1, 1])) * 0.08 for case, value in cases.items()}  # 4 x the spread
    backend_sweep(tmp_path, {"python": cases, "cpp": dict(cases), "cpp + compile": planted, "python + compile": None})
    result = report(tmp_path)
    assert result.returncode == 1
    check = result.stdout.split("### Accuracy")[1].split("###")[0]
    assert "| cpp | 0.0000 |" in check and "(seed spread)" in check
    assert "| cpp + compile |" in check and check.count("| NO |") == 1
    assert "FLAG: cpp + compile: per-case Dice differs from python's by 0.0800 on average" in result.stdout
    assert "FLAG: cpp: " not in result.stdout
    assert "| cpp | 25.0 | 4.00x | 10.0 | 1.00x | 1000 | 1.00x |" in result.stdout  # mean costs, as ratios
    assert "FLAG: run python_compile_0 (python + compile): no metrics.json" in result.stdout
    rows = csv_rows(tmp_path)
    assert rows["", "Dice", "cpp"]["verdict"].startswith("no difference found")  # compile rows are their own
    assert rows["", "Dice", "cpp + compile"]["n_cases"] == "20"
    cells = {(r[1], r[2], r[3]): r for r in (row.split("|")[1:-1] for row in runs_table(result.stdout)[1:])}
    assert cells[" cpp ", " True ", " 0 "][-1].strip() == "4.00x"  # python's mean step time over its own
    assert cells[" python ", " True ", " 0 "][4].strip() == "failed"


def test_one_seed_checks_against_the_tolerance(tmp_path):
    cases = {f"case_{i}": 0.7 for i in range(5)}
    backend_sweep(tmp_path, {"python": cases, "cpp": {c: v - 0.05 for c, v in cases.items()}}, seeds=(0,))
    result = report(tmp_path)
    assert result.returncode == 1
    assert "| cpp | 0.0500 | 0.0200 (tolerance) |" in result.stdout
    assert report(tmp_path, "--dice-tolerance", "0.06").returncode == 0


def test_pytorch_profiler_trace_names_the_op(tmp_path):
    train(compose_config(tiny_overrides() + ["op=cpp", "profiler=pytorch", "data.num_train=16"], output_dir=tmp_path))
    traces = list((tmp_path / "profiler").rglob("*.pt.trace.json"))
    assert traces, f"no trace under {tmp_path / 'profiler'}: {list((tmp_path).rglob('*'))[:20]}"
    assert any("segnet_ops::edge_enhance" in t.read_text() for t in traces)
