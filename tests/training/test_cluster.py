"""On a cluster, exactly one process plans and checks the dataset and writes the run folder's
files, whatever started the ranks; the others read what it wrote, and its failure stops them
with its message (segnet.cluster)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time

import pytest

from helpers import ROOT
from helpers.data import write_decathlon
from helpers.training import TINY_MODEL, TINY_TRAINER
from segnet import cluster
from segnet.errors import ConfigError
from segnet.files import write_text


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


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["torchrun", "slurm"])
def test_two_processes_started_together_plan_once_and_both_train(tmp_path, kind):
    root = write_decathlon(tmp_path / "Task", cases=3)
    port = random.randint(15100, 15900)
    args = [sys.executable, str(ROOT / "train.py"), "data=decathlon", f"data.root={root}", "data.num_folds=3",
            "data.num_workers=0", "data.spatial_dims=2", "data.patch_size=[16,16]", "data.batch_size=2",
            "data.steps_per_epoch=2", "op=cpp", *TINY_MODEL, *TINY_TRAINER, "trainer=ddp",
            "trainer.accelerator=cpu", "trainer.devices=2", f"hydra.run.dir={tmp_path / 'run'}"]
    processes = [subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for env in launcher_environments(kind, port)]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    assert [p.returncode for p in processes] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    assert sum("planning " in o for o in outputs) == 1  # one fingerprint and integrity check
    assert sorted(p.name for p in (tmp_path / "run").glob("*.json")) == ["metrics.json", "plans.json", "splits.json"]
    assert not list((tmp_path / "run").glob("*.failed"))


def test_the_others_wait_for_the_first_process_and_stop_with_its_error(tmp_path):
    result = tmp_path / "plans.json"
    threading.Timer(0.3, write_text, (result, "{}")).start()
    cluster.wait_for(result, timeout_s=30)  # returns once the file is there
    failed = tmp_path / "other.json"

    def fail():
        with cluster.reporting_failure(failed):
            raise ValueError("case_007: label values [9] are not classes")

    threading.Timer(0.3, lambda: pytest.raises(ValueError, fail)).start()
    with pytest.raises(ConfigError, match=r"rank 0\) failed to write other.json: ValueError: case_007: label"):
        cluster.wait_for(failed, timeout_s=30)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="waited 1 s for rank 0"):
        cluster.wait_for(tmp_path / "never.json", timeout_s=1)
    assert time.monotonic() - started < 10


def test_rank_zero_is_read_from_whatever_started_the_process(monkeypatch):
    monkeypatch.setattr(cluster.rank_zero_only, "rank", 1)
    assert not cluster.is_first_process()
    monkeypatch.setattr(cluster.rank_zero_only, "rank", 0)
    monkeypatch.setenv("NODE_RANK", "1")
    assert not cluster.is_first_process()  # the first process of another node
    monkeypatch.setenv("NODE_RANK", "0")
    assert cluster.is_first_process()
