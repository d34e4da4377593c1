"""Which process of a job writes the run folder's files (plans.json, splits.json, metrics.json),
whatever started the processes: Lightning's own launcher, torchrun, SLURM's srun or
hydra/launcher=slurm. What every rank reads is made so that each reads the same thing without
waiting for another: the plan is chosen alike by all (segnet.planning.plan), and what the first
to arrive builds (the fingerprint record, the preprocessed cache) is built under a lock that the
others wait on, which a dead process releases."""

from __future__ import annotations

import os

import torch


def is_first_process() -> bool:
    """Global rank 0, as Lightning reads it from the launcher (RANK, LOCAL_RANK, SLURM_PROCID,
    JSM_NAMESPACE_RANK; none: a process on its own), on the first node."""
    # Imported here: the commands that only read data (segnet-plan --verify) need no Lightning.
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    return (rank_zero_only.rank or 0) == 0 and int(os.environ.get("NODE_RANK", "0")) == 0


def trainer_uses_gpu(trainer_cfg) -> bool:
    """Whether a trainer config (conf/trainer/) trains on GPUs: asked for, or "auto" with one visible."""
    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda"):
        return True
    return accelerator == "auto" and torch.cuda.is_available()
