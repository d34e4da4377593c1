"""Which checkpoint a run resumes, and that it is this run's.

ckpt_path=auto takes the run folder's newest checkpoints/last.ckpt or hpc_ckpt_*.ckpt (what
Lightning's SLURM requeue writes), ckpt_path=PATH that checkpoint, null none. A resume continues
one run, so the checkpoint must have been trained with this configuration: the model, data,
optimizer, loss and inference sections it holds are compared with this run's (the loss by what
it computes: its terms of nonzero weight), all but what may change when a run moves (RESUMABLE),
and a difference stops the run with what differs. ckpt_path=null
starts afresh, also where Lightning would resume an hpc checkpoint by itself (under SLURM, for a
fit given no checkpoint); there it stops instead, since it cannot be told not to.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lightning.pytorch.plugins.environments import SLURMEnvironment
from omegaconf import DictConfig

from segnet.checkpoints.paths import one_checkpoint
from segnet.checkpoints.reading import as_saved_now, saved_hyperparameters
from segnet.errors import ConfigError
from segnet.model.loss_terms import effective_loss

log = logging.getLogger(__name__)
SECTIONS = ("model", "data", "optim", "loss", "inference")  # SegmentationModule's hyperparameters that make the run
# What a resumed run may change: where and how fast it reads its data, how it batches windows;
# whether the workers or the device augment (the same distributions; auto follows the trainer);
# the schedule's length, which a resume takes from the checkpoint whatever this says; the classes
# the final validation scores for topology, a measurement that trains nothing.
RESUMABLE = {"data.num_workers", "data.cache_dir", "data.cache_rate", "data.augment_on", "inference.sw_batch_size",
             "optim.schedule_steps", "data.topology_classes"}


def run_checkpoints(run_folder: Path) -> list[Path]:
    """The run folder's checkpoints to resume from: last.ckpt and SLURM's hpc_ckpt_*.ckpt."""
    found = [run_folder / "checkpoints" / "last.ckpt", *run_folder.glob("hpc_ckpt_*.ckpt")]
    return [path for path in found if path.is_file()]


def resume_from(cfg: DictConfig) -> str | None:
    """ckpt_path, with auto resolved: the run folder's newest checkpoint, as a preempted or
    requeued job started again finds it; None in a new run folder."""
    if cfg.ckpt_path != "auto":
        return cfg.ckpt_path
    found = run_checkpoints(Path(cfg.paths.output_dir))
    if not found:
        return None
    newest = max(found, key=lambda p: p.stat().st_mtime_ns)
    log.info("ckpt_path=auto: resuming from %s (ckpt_path=null starts afresh)", newest)
    return str(newest)


def continue_in_run_folder(cfg: DictConfig) -> None:
    """Resuming from <run>/checkpoints/*.ckpt continues in <run>: its checkpoints (and so the
    best score so far), logs and metrics.json stay together."""
    checkpoint = one_checkpoint(cfg, "resuming", "a run's checkpoints/last.ckpt")
    if checkpoint.parent.name == "checkpoints":
        run_folder = checkpoint.resolve().parent.parent
        log.info("resuming %s in its run folder %s", checkpoint, run_folder)
        cfg.paths.output_dir = str(run_folder)


def check_fresh_start(run_folder: Path) -> None:
    """A fit given no checkpoint starts afresh, or stops where Lightning would resume anyway."""
    left = sorted(p.name for p in run_folder.glob("hpc_ckpt_*.ckpt"))
    if left and SLURMEnvironment.detect():
        raise ConfigError(
            f"ckpt_path=null, but {run_folder} holds {', '.join(left)} from an earlier SLURM job, which Lightning "
            "resumes by itself under SLURM; use ckpt_path=auto to resume it, or a new hydra.run.dir to start afresh"
        )


def flatten(section: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(section, dict):
        return {prefix: section}
    return {key: value for name, part in section.items() for key, value in flatten(part, f"{prefix}.{name}").items()}


def differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`key: saved there, current here` for every setting of SECTIONS that differs."""
    current = {**current, "loss": effective_loss(current["loss"])}
    now = {k: v for s in SECTIONS for k, v in flatten(current[s], s).items()}
    saved = as_saved_now(saved, now.keys())
    saved = {**saved, "loss": effective_loss(saved["loss"])} if "loss" in saved else saved
    before = {k: v for s in SECTIONS for k, v in flatten(saved.get(s, {}), s).items()}
    missing = object()
    return [f"{key}: {str(before.get(key, 'unset'))[:60]} there, {str(now.get(key, 'unset'))[:60]} now"
            for key in sorted(before.keys() | now.keys())
            if key not in RESUMABLE and before.get(key, missing) != now.get(key, missing)]


def check_same_run(checkpoint: str, hparams: dict[str, Any], given: str) -> None:
    """Stops when `checkpoint` was trained with another configuration than `hparams` (this run's
    SegmentationModule hyperparameters); `given` is the ckpt_path the user gave."""
    found = differences(saved_hyperparameters(checkpoint), hparams)
    if found:
        shown = found[:8] + ([f"and {len(found) - 8} more"] if len(found) > 8 else [])
        raise ConfigError(
            f"ckpt_path={given} resumes {checkpoint}, which was trained with another configuration ("
            + "; ".join(shown) + "). A resume continues the same run: for this configuration use a new "
            "hydra.run.dir, or ckpt_path=null to start afresh"
        )
