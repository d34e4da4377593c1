"""An ablation's sweep folder as the statistics read it: every run's validation Dice, HD95 and NSD
per case and class as one tidy table, and what each variant costs.

Three kinds of sweep, told apart by the config groups Hydra chose for the runs (.hydra/hydra.yaml):
- placement (experiment=ablation_placement): the variant is the conf/variant/ option; baseline none.
- recipe (experiment=ablation_recipe): the variant is the conf/recipe/ option, and runs are grouped
  by their conf/budget/ option (each budget is compared on its own); baseline plan. The baseline's
  runs also give "postprocessing: <rule>" variants: the same predictions' Dice after each
  candidate rule of segnet-postprocess (metrics.json's val_dice_postprocessed_per_case, which the
  experiment's PostprocessingTrials callback records), paired with the predictions as they are
  (the rule's cost is not a training's: the baseline's is shown).
- backends (experiment=ablation_backends, no such group): the variant is the op backend the run used,
  "+ compile" where it ran under torch.compile; baseline python (eager).
- loss (experiment=ablation_loss, told by that name: every run has a loss): the variant is the
  conf/loss/ option, and runs are grouped by their conf/variant/ option (the edge placement);
  baseline dice_ce. Its other view, layer (asked for by name), pairs the placements with none
  within each loss: does the edge layer help once the loss looks at edges?
A run's seed and fold are in its config.yaml (the configuration that trained), its scores in
metrics.json (val_dice_per_case, val_hd95_per_case, val_nsd_per_case, and the topology metrics of
thin classes; a metric the run did not record is left out). Training records a topology metric as
NaN for the classes outside data.topology_classes: no score, so not read (the statistics would read
NaN as a class absent from the case and not predicted). A run without metrics.json failed, and is
named.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from segnet.config import RUN_CONFIG
from segnet.errors import ConfigError
from segnet.topology_metrics import TOPOLOGY_METRICS, topology_classes

COSTS = ("parameters", "step_time_ms_median", "samples_per_s", "peak_memory_mb")
METRIC_KEYS = {"Dice": "val_dice_per_case", "HD95": "val_hd95_per_case", "NSD": "val_nsd_per_case",
               # the thin classes' (data.topology_classes), where a run scored them
               "clDice": "val_cldice_per_case", "Betti0 error": "val_betti0_error_per_case",
               "Betti1 error": "val_betti1_error_per_case"}
POSTPROCESSED_KEY = "val_dice_postprocessed_per_case"  # {rule: {case: {class: Dice}}}, the final validation's
# kind -> (the config group naming a run's variant, the group naming its comparison group, the baseline)
KINDS = {"placement": ("variant", None, "none"), "recipe": ("recipe", "budget", "plan"),
         "backends": (None, None, "python"), "loss": ("loss", "variant", "dice_ce"),
         "layer": ("variant", "loss", "none")}
EXPERIMENT_KINDS = {"ablation_loss": "loss"}  # sweeps told by their experiment, not by a group
DETECTED_BY_GROUP = ("placement", "recipe")


def postprocessed(trial: str) -> str:
    """The recipe ablation's name for the baseline's predictions after one postprocessing rule."""
    return f"postprocessing: {trial}"


@dataclass
class Sweep:
    kind: str  # a key of KINDS
    scores: list[dict[str, Any]] = field(default_factory=list)  # group, variant, fold, seed, case, class, metric, value
    costs: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)  # (group, variant) -> mean cost
    failed: list[str] = field(default_factory=list)  # "<run> (<variant>): why"
    runs: list[dict[str, Any]] = field(default_factory=list)  # folder, group, variant, metrics (None: failed)

    @property
    def baseline(self) -> str:
        return KINDS[self.kind][2]

    def groups(self) -> list[str]:
        return sorted({run["group"] for run in self.runs})

    def in_group(self, group: str) -> list[dict[str, Any]]:
        return [row for row in self.scores if row["group"] == group]


def run_folders(sweep_dir: Path) -> list[Path]:
    return sorted(path.parent.parent for path in Path(sweep_dir).glob("*/.hydra/config.yaml"))


def run_config_of(run: Path) -> DictConfig:
    """The configuration a run trained with (its config.yaml); the composed one Hydra saved for a
    run that stopped before it settled its own."""
    trained = run / RUN_CONFIG
    return OmegaConf.load(trained if trained.is_file() else run / ".hydra" / "config.yaml")


def choices_of(run: Path) -> dict[str, Any]:
    """The config group options Hydra chose for a run ({} where it left no hydra.yaml)."""
    hydra_file = run / ".hydra" / "hydra.yaml"
    if not hydra_file.is_file():
        return {}
    return dict(OmegaConf.load(hydra_file).hydra.runtime.choices)


def variant_of(run: Path) -> str | None:
    """The conf/variant/ option of a run; None for a run of another sweep."""
    return choices_of(run).get("variant")


def kind_of(run: Path) -> str:
    choices = choices_of(run)
    if choices.get("experiment") in EXPERIMENT_KINDS:
        return EXPERIMENT_KINDS[choices["experiment"]]
    return next((kind for kind in DETECTED_BY_GROUP if choices.get(KINDS[kind][0]) is not None), "backends")


def label_of(run: Path, kind: str, config: DictConfig, metrics: dict[str, Any] | None) -> tuple[str, str]:
    """(group, variant) of a run in a sweep of this kind."""
    variant_group, group_group, _ = KINDS[kind]
    choices = choices_of(run)
    group = f"{group_group}={choices.get(group_group)}" if group_group else ""
    if variant_group:
        if choices.get(variant_group) is None:
            raise ConfigError(f"{run} names no {variant_group} but the sweep's first run does: pass one sweep's "
                              f"folder (multirun/<task>/<time>)")
        return group, str(choices[variant_group])
    backend = metrics["backend"] if metrics else str(config.op.backend)  # what auto resolved to, where known
    return group, f"{backend}{' + compile' if config.get('compile') else ''}"


def scored_classes(config: DictConfig, metric: str, per_case: dict[str, dict[str, float]]) -> set[str]:
    """The classes of a run's per-case scores of one metric that the run scored: all of them, but for a
    topology metric only the thin ones (data.topology_classes); none of a metric the run did not record."""
    names = ["background", *next(iter(per_case.values()), {})]
    if metric not in TOPOLOGY_METRICS or not per_case:
        return set(names[1:])
    return {names[c] for c in topology_classes(config.get("data", {}).get("topology_classes"), names)}


def load_sweep(sweep_dir: Path, kind: str | None = None) -> Sweep:
    """The sweep's scores, mean costs per (group, variant) and failed runs; its kind from its first
    run unless given (the loss sweep's layer view)."""
    folders = run_folders(sweep_dir)
    sweep = Sweep(kind or (kind_of(folders[0]) if folders else "backends"))
    costs: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in folders:
        config = run_config_of(run)
        metrics_file = run / "metrics.json"
        metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else None
        group, variant = label_of(run, sweep.kind, config, metrics)
        sweep.runs.append({"folder": run, "group": group, "variant": variant, "metrics": metrics,
                           "seed": config.get("seed")})
        if metrics is None:
            sweep.failed.append(f"{run.name} ({variant}): no metrics.json")
            continue
        fold = config.get("data", {}).get("fold", "all")
        scored = {variant: {metric: metrics.get(key, {}) for metric, key in METRIC_KEYS.items()}}
        if sweep.kind == "recipe" and variant == sweep.baseline:  # postprocessing on, paired with off
            scored.update({postprocessed(trial): {"Dice": per_case}
                           for trial, per_case in metrics.get(POSTPROCESSED_KEY, {}).items()})
        for label, per_metric in scored.items():
            for metric, per_case in per_metric.items():
                classes = scored_classes(config, metric, per_case)
                sweep.scores += [{"group": group, "variant": label, "fold": fold, "seed": config.get("seed"),
                                  "case": case, "class": name, "metric": metric, "value": value}
                                 for case, per_class in per_case.items() for name, value in per_class.items()
                                 if name in classes]
            for key in COSTS:
                costs[group, label][key].append(metrics.get(key, float("nan")))
    sweep.costs = {label: {k: float(np.mean(x)) for k, x in c.items()} for label, c in costs.items()}
    return sweep
