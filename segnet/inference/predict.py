"""From a prediction config to label maps on disk: what segnet-predict runs."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from segnet.data.input_check import check_inputs
from segnet.files import remove_temporaries
from segnet.inference.component_rules import rules_files, rules_for
from segnet.inference.ensemble import Predictor
from segnet.inference.exported import load_exported
from segnet.inference.input_cases import find_cases
from segnet.inference.loading import inference_device, load_for_inference
from segnet.inference.package import package_temperature
from segnet.inference.pipeline import predicted_cases
from segnet.inference.prediction_arguments import (
    EXPORTED,
    NNUNET,
    PACKAGES,
    PredictionInputs,
    part_of,
    prediction_inputs,
)
from segnet.inference.prediction_writer import Prediction, PredictionWriter
from segnet.inference.previous_stage import first_stage_maps
from segnet.inference.provenance import claim, model_record, stamp
from segnet.inference.temperature import given_temperature
from segnet.inference.trained_model import TrainedModel
from segnet.inference.uncertainty import write_table
from segnet.progress import bar

log = logging.getLogger(__name__)


def load_models(inputs: PredictionInputs, device: str, backend: str) -> list[TrainedModel]:
    """The checkpoints or exported programs to predict with, loaded."""
    if inputs.kind == EXPORTED:
        return [load_exported(path, inference_device(device)) for path in inputs.models]
    if inputs.kind == NNUNET:
        from segnet.inference.nnunet_model import (
            load_nnunet,  # the extra's: its network is dynamic_network_architectures'
        )

        return [load_nnunet(path, inference_device(device)) for path in inputs.models]
    return [load_for_inference(path, device, backend) for path in inputs.models]


def predict_command(cfg: DictConfig) -> list[Prediction]:
    inputs = prediction_inputs(cfg)
    models = load_models(inputs, cfg.device, cfg.op.backend)
    packages = list(inputs.files) if inputs.kind == PACKAGES else []
    temperature = given_temperature(cfg.temperature, [package_temperature(package) for package in packages])
    predictor = Predictor(models, tta=inputs.tta, uncertainty=bool(cfg.uncertainty), temperature=temperature)
    cases = part_of(find_cases(Path(cfg.input), predictor.in_channels), cfg.num_parts, cfg.part_id)
    cases = check_inputs(cases, int(cfg.max_voxels), predictor.in_channels, skip_broken=bool(cfg.skip_broken))
    rules = rules_for(cfg.postprocessing, inputs.folders)
    record = model_record(inputs.files, predictor, rules, rules_files(cfg.postprocessing, inputs.folders))
    # a cascade's first stage predicts every case first, into <output>/previous_stage/
    previous = first_stage_maps(predictor.previous_stage, cases, Path(cfg.output), cfg.device, cfg.op.backend,
                                int(cfg.num_workers))
    writer = PredictionWriter(predictor, Path(cfg.output), save_probabilities=bool(cfg.save_probabilities),
                              rules=rules, stamp=stamp(record), previous=previous,
                              output_format=cfg.get("output_format"))
    # Before the first label map: continue=true never adds to another model's label maps.
    claim(Path(cfg.output), record, bool(cfg.get("continue")), [writer.label_path(case) for case in cases])
    all_cases = cases
    if cfg.get("continue"):  # nnU-Net's --continue_prediction: after a killed run, only what is missing
        done = {case.name for case in cases if writer.is_done(case)}
        cases = [case for case in cases if case.name not in done]
        left = remove_temporaries(cfg.output)
        again = [case for case in cases if writer.label_path(case).is_file()]  # e.g. an overwrite's leftovers
        log.info("continuing: %d case(s) already in %s (%d half-written file(s) removed; %d label map(s) there "
                 "predicted again: another model's or another image's, or without the probabilities or "
                 "uncertainty asked for, or these tempered otherwise)",
                 len(done), cfg.output, len(left), len(again))
    log.info("predicting %d case(s) from %s with %d model(s), tta %s, temperature %s, postprocessing %s", len(cases),
             cfg.input, len(models), predictor.tta, [c.temperature for c in predictor.configurations], rules.to_json())
    predictions = list(bar(predicted_cases(writer, cases, int(cfg.num_workers)), "predicting", "case",
                           total=len(cases)))
    if predictor.uncertainty:
        table = write_table(Path(cfg.output), {case.name: writer.uncertainty_path(case) for case in all_cases})
        log.info("uncertainty maps (<case>_uncertainty.npz) and each case's score in %s", table)
    log.info("label maps in %s", cfg.output)
    return predictions
