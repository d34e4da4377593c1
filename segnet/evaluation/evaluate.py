"""From an evaluation config to the reports: what segnet-evaluate runs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from segnet.checkpoints.paths import run_folder
from segnet.evaluation.checkpoint_cases import checkpoint_cases
from segnet.evaluation.evaluation_arguments import evaluation_inputs
from segnet.evaluation.evaluator import Evaluator, in_sample_cases, run_split, summarize, write_reports
from segnet.evaluation.pictures import write_case_pictures, write_reliability_picture
from segnet.inference.component_rules import rules_files, rules_for, rules_origin
from segnet.inference.temperature import given_temperature
from segnet.topology_metrics import topology_classes

log = logging.getLogger(__name__)


def mirroring(tta: bool) -> str:
    """Why this Dice differs from the training's final one for the same weights, or that it does not."""
    if tta:
        return "with test-time mirroring (tta=true; training's validation Dice is without it, tta=false gives that)"
    return "without test-time mirroring (tta=false), as training validates"


def evaluate_command(cfg: DictConfig) -> dict[str, Any]:
    checkpoint, description = evaluation_inputs(cfg)
    run = run_folder(checkpoint)
    scored = checkpoint_cases(checkpoint, run, cfg.data.split, description, cfg, "evaluated")
    model, cases = scored.model, scored.cases
    output_dir = Path(cfg.paths.output_dir)
    rules = rules_for(cfg.postprocessing, [run])
    origin = rules_origin(rules_files(cfg.postprocessing, [run]), [case.name for case in cases])
    if origin["optimistic"]:
        log.warning("postprocessing: %s, so the scores with it are optimistic (summary.json's "
                    "without_postprocessing has them without)", origin["why"])
    trained_on = in_sample_cases(cases, run_split(description, model.data, run / "splits.json"))
    if trained_on:
        log.warning("%d of the %d case(s) scored (data.split=%s) are cases %s trained on (%s), so their scores are "
                    "in-sample: score a fold's run on its validation split for out-of-sample scores",
                    len(trained_on), len(cases), cfg.data.split, run, ", ".join(trained_on[:5]))
    log.info("evaluating %s on %d %s case(s) of %s (backend %s, tta %s, postprocessing %s)", checkpoint, len(cases),
             cfg.data.split, description.root, model.backend, cfg.tta, rules.to_json())
    topology = topology_classes(cfg.get("topology_classes"), list(model.settings.class_names))
    previous = scored.first_stage_maps(output_dir, int(cfg.num_workers))
    results = Evaluator(model, output_dir, tta=cfg.tta, nsd_tolerance_mm=float(cfg.nsd_tolerance_mm),
                        rules=rules, topology=topology, previous=previous,
                        temperature=given_temperature(cfg.temperature, [])).run(cases, int(cfg.num_workers))
    summary = summarize(results, list(model.settings.class_names))
    summary["evaluated"] = {"checkpoint": str(checkpoint.resolve()), "step": model.step, "split": cfg.data.split,
                            "tta": bool(cfg.tta), "temperature": cfg.temperature,
                            "postprocessing": {"rules": rules.to_json(), **origin}, "trained_on": trained_on}
    write_reports(summary, output_dir)
    write_case_pictures(summary, output_dir)
    write_reliability_picture(summary, output_dir)
    log.info("foreground mean Dice %.4f, HD95 %.2f mm, ECE %.4f, %s; reports, cases_<class>.png and reliability.png "
             "in %s", summary["foreground_mean"]["Dice"], summary["foreground_mean"]["HD95"],
             summary.get("calibration", {}).get("foreground", {}).get("ECE", float("nan")), mirroring(bool(cfg.tta)),
             output_dir)
    return summary
