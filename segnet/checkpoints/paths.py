"""The checkpoint files a command is given (ckpt_path=, one or a list), checked before anything
is read: a missing file, or the final.ckpt of a run that has not finished, is a ConfigError that
says what to give instead; and the run folder a checkpoint belongs to."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from segnet.errors import ConfigError

FINAL = "final.ckpt"  # a finished run's final weights, nnU-Net's checkpoint_final: what commands read by default
BEST = f"a training run's checkpoints/{FINAL}"


def checkpoint_paths(cfg: DictConfig, key: str = "ckpt_path", shown_as: str | None = None,
                     what: str = BEST) -> list[Path]:
    """The file(s) a command was given under `key` (one, or a list for an ensemble), or a
    ConfigError saying that `what` is expected instead."""
    shown_as = shown_as or key
    if OmegaConf.is_missing(cfg, key) or cfg.get(key) is None:
        raise ConfigError(f"{shown_as} is required: point it at {what}")
    given = cfg[key]
    paths = [Path(p) for p in (given if OmegaConf.is_list(given) else [given])]
    for path in paths:
        check_checkpoint_file(path, shown_as, what)
    return paths


def check_checkpoint_file(path: Path, shown_as: str, what: str = BEST) -> None:
    """A ConfigError unless `path` is a file: for a run's final.ckpt, that the run has not finished."""
    if path.name == FINAL and not path.is_file() and (path.parent / "last.ckpt").is_file():
        raise ConfigError(f"{shown_as}={path}: that run has not finished (a run writes {FINAL} at its end). "
                          "Resume it (segnet-train ckpt_path=auto in its folder), or name its last.ckpt or "
                          "best.ckpt to use the weights it has")
    if not path.is_file():
        raise ConfigError(f"{shown_as}={path} is not a file; point it at {what}")


def run_folder(checkpoint: Path) -> Path:
    """The run a checkpoint belongs to (<run>/checkpoints/<name>.ckpt), or its own folder."""
    folder = checkpoint.resolve().parent
    return folder.parent if folder.name == "checkpoints" else folder


def one_checkpoint(cfg: DictConfig, purpose: str, what: str = BEST) -> Path:
    """The single checkpoint of a command that takes one."""
    paths = checkpoint_paths(cfg, what=what)
    if len(paths) != 1:
        raise ConfigError(
            f"ckpt_path has {len(paths)} checkpoints; {purpose} takes one (segnet-predict ensembles them)"
        )
    return paths[0]
