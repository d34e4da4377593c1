"""A placement ablation's sweep folder (experiment=ablation_placement) as the statistics read it:
every run's validation Dice per case and class as one tidy table, and what each variant costs.

A run's variant is the conf/variant/ option Hydra chose for it (.hydra/hydra.yaml), its seed and
fold are in its resolved config, and its scores in metrics.json (val_dice_per_case). A run
without metrics.json failed, and is named.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from segnet.errors import ConfigError

COSTS = ("parameters", "step_time_ms_median", "peak_memory_mb")


def run_folders(sweep_dir: Path) -> list[Path]:
    return sorted(path.parent.parent for path in Path(sweep_dir).glob("*/.hydra/config.yaml"))


def variant_of(run: Path) -> str | None:
    """The conf/variant/ option of a run; None for a run of another sweep."""
    hydra_file = run / ".hydra" / "hydra.yaml"
    if not hydra_file.is_file():
        return None
    return OmegaConf.load(hydra_file).hydra.runtime.choices.get("variant")


def load_sweep(sweep_dir: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]], list[str]]:
    """(scores: rows of variant, fold, seed, case, class, metric, value; each variant's mean cost;
    the runs that failed)."""
    scores, costs, failed = [], defaultdict(lambda: defaultdict(list)), []
    for run in run_folders(sweep_dir):
        variant = variant_of(run)
        if variant is None:
            raise ConfigError(f"{run} names no variant: pass a sweep of experiment=ablation_placement")
        if not (run / "metrics.json").is_file():
            failed.append(f"{run.name} ({variant}): no metrics.json")
            continue
        config, metrics = OmegaConf.load(run / ".hydra" / "config.yaml"), json.loads((run / "metrics.json").read_text())
        fold = config.data.get("fold", "all")
        for case, per_class in metrics["val_dice_per_case"].items():
            scores += [{"variant": variant, "fold": fold, "seed": config.seed, "case": case, "class": name,
                        "metric": "Dice", "value": value} for name, value in per_class.items()]
        for key in COSTS:
            costs[variant][key].append(metrics.get(key, float("nan")))
    return scores, {v: {k: float(np.mean(x)) for k, x in c.items()} for v, c in costs.items()}, failed
