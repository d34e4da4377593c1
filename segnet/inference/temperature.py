"""Temperature scaling, nnU-Net's maintainer's advice for its overconfident probabilities: one
number T per configuration, by which the logits are divided before the softmax (T > 1 softens,
T < 1 sharpens). The logits are those of the configuration's averaged probabilities (log p;
for region-based labels each region's log(p / (1 - p)) before its sigmoid), so that the label
map, the likeliest class (each region over 1/2), never changes. segnet-find-best-configuration
fits T on its out-of-fold probabilities, each case's from the one fold that did not train on it,
minimizing their negative log-likelihood (NLL) of the reference over a sample of voxels of every
case. segnet-predict applies it only where asked (temperature=): an ensemble of the folds is
softer than the single models T was fitted on, and on held-out generated heads the fitted T left
single models' calibration unchanged and the ensemble's no better (docs/results/uncertainty.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import minimize_scalar

from segnet.errors import ConfigError

EPSILON = 1e-7
SAMPLE = 20000  # voxels per case to fit on, drawn with a fixed seed: enough for one number
BOUNDS = (0.05, 20.0)  # the temperatures searched
FITTED = "fitted"  # temperature=fitted: the one a model package records


def tempered(probabilities: torch.Tensor, temperature: float, regions: bool, dim: int = 0) -> torch.Tensor:
    """The probabilities (channels along `dim`) of the logits divided by `temperature`."""
    if temperature == 1.0:
        return probabilities
    if regions:
        return torch.sigmoid(torch.logit(probabilities, EPSILON) / temperature)
    return torch.softmax(probabilities.clamp_min(EPSILON).log() / temperature, dim)


def voxel_sample(probabilities: np.ndarray, reference: np.ndarray, regions: tuple[tuple[int, ...], ...] | None,
                 ignore_label: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to SAMPLE scored voxels of a case: their probabilities (voxels, channels) and what the
    reference says: the class (softmax), or which regions hold the voxel (voxels, regions)."""
    scored = np.arange(reference.size) if ignore_label is None else np.flatnonzero(reference.ravel() != ignore_label)
    chosen = np.random.default_rng(seed).choice(scored, min(SAMPLE, scored.size), replace=False)
    p = probabilities.reshape(probabilities.shape[0], -1)[:, chosen].T
    truth = reference.ravel()[chosen]
    if regions is not None:
        truth = np.stack([np.isin(truth, values) for values in regions], 1).astype(np.float32)
    return p.astype(np.float32), truth


def nll(probabilities: torch.Tensor, truth: torch.Tensor, temperature: float, regions: bool) -> float:
    """The mean negative log-likelihood of the reference under the tempered probabilities (voxels, channels)."""
    if regions:
        logits = torch.logit(probabilities, EPSILON) / temperature
        return float(torch.nn.functional.binary_cross_entropy_with_logits(logits, truth))
    logits = probabilities.clamp_min(EPSILON).log() / temperature
    return float(torch.nn.functional.cross_entropy(logits, truth.long()))


def fit_temperature(probabilities: np.ndarray, truth: np.ndarray, regions: bool) -> dict[str, float]:
    """The temperature of least NLL on the voxels (voxel_sample's, concatenated), and the NLL before and after."""
    p, t = torch.from_numpy(probabilities), torch.from_numpy(truth)
    found = minimize_scalar(lambda log_t: nll(p, t, math.exp(log_t), regions), method="bounded",
                            bounds=tuple(math.log(b) for b in BOUNDS), options={"xatol": 1e-3})
    temperature = math.exp(found.x)
    return {"temperature": temperature, "nll_before": nll(p, t, 1.0, regions),
            "nll_after": nll(p, t, temperature, regions), "voxels": int(len(p))}


def given_temperature(value, recorded: list[Mapping[str, float] | None]) -> float | dict[str, float]:
    """segnet-predict's temperature=: not given, none (1: the evidence in docs/results/uncertainty.md
    shows no gain from the fitted one); a number for every configuration; `fitted`, the one each
    model package given records; or a file with a `temperature` per configuration
    (segnet-find-best-configuration's best_configuration.json)."""
    if value is None:
        return 1.0
    if value == FITTED:
        fitted = [each for each in recorded if each]
        if not fitted:
            raise ConfigError(f"temperature={FITTED}: none of the models given records a fitted temperature (a model "
                              "package of a segnet-find-best-configuration choice does): give a number or the "
                              "choice's best_configuration.json")
        return {name: t for each in fitted for name, t in each.items()}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value <= 0:
            raise ConfigError(f"temperature={value}: give a temperature above 0 (1: none)")
        return float(value)
    path = Path(str(value))
    fitted = json.loads(path.read_text()).get("temperature") if path.is_file() else None
    if not isinstance(fitted, dict):
        raise ConfigError(f"temperature={value}: give a number above 0, {FITTED} (a model package's), or segnet-find-"
                          "best-configuration's best_configuration.json (its temperature per configuration)")
    return {str(name): float(t) for name, t in fitted.items()}


def configuration_temperature(temperature: float | Mapping[str, float], configuration: str) -> float:
    """The temperature of one configuration's probabilities."""
    if not isinstance(temperature, Mapping):
        return float(temperature)
    if configuration not in temperature:
        raise ConfigError(f"temperature: fitted for {', '.join(sorted(temperature))}, not for the models' "
                          f"configuration {configuration}: give a number, or the choice these models come from")
    return float(temperature[configuration])
