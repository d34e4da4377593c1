"""The candidates segnet-find-best-configuration chooses among, and the choice, as nnU-Net's
nnUNetv2_find_best_configuration makes it: every configuration alone (its folds' validation
predictions: the cross-validation) and every pair's ensemble (the two configurations'
probabilities averaged on each image's own grid, one weight each, since their plans differ).

The choice is the candidate of the highest mean Dice over the cross-validation's cases and
classes (CHOICE_RULE). Every other candidate is compared with it by the ablations' paired
statistics (segnet.evaluation.statistics), on Dice, HD95 and NSD, so the output says whether the
winner is better than the runner-up or only ahead of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from segnet.evaluation.statistics import compare, mean_score

METRICS = ("Dice", "HD95", "NSD")
CHOICE_RULE = ("the highest mean Dice over the cross-validation's cases and classes (a class absent from a case "
               "and not predicted scores 1); on a tie, a single configuration before an ensemble, then the "
               "order the runs were given in")


@dataclass(frozen=True)
class Candidate:
    configurations: tuple[str, ...]  # one: a configuration alone; two: their ensemble

    @property
    def name(self) -> str:
        return " + ".join(self.configurations)


def candidates(configurations: Sequence[str]) -> list[Candidate]:
    """Every configuration alone, then every pair's ensemble, in the order given."""
    return [Candidate((name,)) for name in configurations] + [Candidate(pair) for pair in
                                                               combinations(configurations, 2)]


def ensemble_probabilities(candidate: Candidate, probabilities: Mapping[str, np.ndarray]) -> np.ndarray:
    """A candidate's probabilities of one case from each configuration's (on the image's grid):
    their mean, one weight per configuration."""
    return np.mean([probabilities[name] for name in candidate.configurations], axis=0)


def choose(scores: Sequence[Mapping[str, Any]], options: Sequence[Candidate]) -> dict[str, Any]:
    """The best of `options` by CHOICE_RULE, from tidy score rows (variant = a candidate's name,
    fold, seed, case, class, metric, value), with each candidate's mean of every metric and the
    paired comparison of every other candidate with the best."""
    means = {option.name: {metric: mean_score(scores, option.name, metric) for metric in METRICS}
             for option in options}
    order = {option.name: index for index, option in enumerate(options)}
    best = max(options, key=lambda o: (means[o.name]["Dice"], -len(o.configurations), -order[o.name]))
    comparisons = {metric: compare(scores, best.name, metric) for metric in METRICS} if len(options) > 1 else {}
    return {"rule": CHOICE_RULE, "best": best.name, "configurations": list(best.configurations),
            "means": means, "compared_with_best": comparisons}
