"""On a cluster, whatever started the ranks: the dataset is checked once, every rank trains the
plan the run folder records, draws its own batches and as many per epoch as asked, one process
writes the run folder's files (segnet.cluster), and nothing an earlier attempt left stops a job."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.data import write_decathlon
from helpers.training import TINY_MODEL, TINY_TRAINER, batch_log, compose_config, read_batch_logs
from segnet import cluster
from segnet.data.dataset_json import describe_dataset
from segnet.files import write_json, write_text
from segnet.planning.plan import make_plan


def launcher_environments(kind: str, port: int) -> list[dict[str, str]]:
    """The variables torchrun or SLURM's srun give each of two processes on one node (no LOCAL_RANK
    from srun: Lightning reads SLURM_PROCID and SLURM_LOCALID)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    if kind == "torchrun":
        return [{**clean, "RANK": str(r), "LOCAL_RANK": str(r), "GROUP_RANK": "0", "WORLD_SIZE": "2",
                 "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                 "TORCHELASTIC_RUN_ID": "test"} for r in range(2)]
    job = str(port - 15000)  # Lightning's SLURM environment takes its port from the job id
    return [{**clean, "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "2", "SLURM_PROCID": str(r),
             "SLURM_LOCALID": str(r), "SLURM_NODEID": "0", "SLURM_NNODES": "1", "SLURM_JOB_ID": job,
             "SLURM_JOB_NAME": "segnet-test", "SLURM_NODELIST": "127.0.0.1"} for r in range(2)]


def plan_with_patch(root: Path, patch: list[int], path: Path, cache: Path) -> Path:
    """A plan of the dataset (fingerprinted into a cache of its own) with the 2D patch `patch`."""
    cfg = compose_config(["data=folder", f"data.root={root}", f"data.cache_dir={cache}", *TINY_MODEL])
    plan = make_plan(describe_dataset(str(root)), cfg)
    plan["configurations"]["2d"]["patch_size"] = patch
    write_json(path, plan)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["torchrun", "slurm"])
def test_two_processes_check_once_train_one_plan_and_draw_their_own_batches(tmp_path, kind):
    root = write_decathlon(tmp_path / "Task", cases=5)  # fold 0 of 5: 4 training cases
    run = tmp_path / "run"
    # A reused run folder: a plans.json of another patch, and a failure marker a minute old at most
    plan_with_patch(root, [8, 8], run / "plans.json", tmp_path / "other")
    write_text(run / "plans.json.failed", "DatasetError: an earlier attempt's")
    given = plan_with_patch(root, [16, 16], tmp_path / "given.json", tmp_path / "other")
    port = random.randint(15100, 15900)
    args = [sys.executable, str(ROOT / "train.py"), "data=folder", f"data.root={root}", f"data.plan={given}",
            "data.num_workers=1", "data.spatial_dims=2", "data.batch_size=2", "data.steps_per_epoch=4", "op=cpp",
            *TINY_MODEL, *TINY_TRAINER, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
            f"hydra.run.dir={run}", *batch_log(tmp_path / "batches")]
    environments = [{**env, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"} for env in launcher_environments(kind, port)]
    processes = [subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for env in environments]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    assert [p.returncode for p in processes] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    logs = read_batch_logs(tmp_path / "batches")
    assert len(logs) == 2
    for log in logs:  # steps_per_epoch on every rank, with the plan passed in
        assert log["global_step"] == 4 and len(log["batches"]) == 4
        assert all(batch["shape"][2:] == [16, 16] for batch in log["batches"])
    assert [b["sum"] for b in logs[0]["batches"]] != [b["sum"] for b in logs[1]["batches"]]
    seeds = [{seed for batch in log["batches"] for seed in batch["seeds"]} for log in logs]
    assert seeds[0] and seeds[1] and not seeds[0] & seeds[1]  # each rank its own draws
    assert json.loads((run / "plans.json").read_text()) == json.loads(given.read_text())  # what was trained
    assert sorted(p.name for p in run.glob("*.json")) == ["metrics.json", "plans.json", "splits.json"]
    assert sum("fingerprint and integrity check of 5 of 5 case(s)" in o for o in outputs) == 1  # read once


def test_rank_zero_is_read_from_whatever_started_the_process(monkeypatch):
    from lightning.fabric.utilities.rank_zero import rank_zero_only  # what Lightning read from the launcher

    monkeypatch.setattr(rank_zero_only, "rank", 1)
    assert not cluster.is_first_process()
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    monkeypatch.setenv("NODE_RANK", "1")
    assert not cluster.is_first_process()  # the first process of another node
    monkeypatch.setenv("NODE_RANK", "0")
    assert cluster.is_first_process()
