"""Which postprocessing rules (segnet.inference.component_rules) raise the cross-validation's mean
Dice, as nnU-Net decides them: first the largest component of the foreground as a whole, kept
when it raises the mean Dice over the foreground classes (or regions); then, on top, the largest
component of each class, or of each region in turn, kept when it raises that class's or region's
Dice. A tie keeps the prediction as it is.

A class's rule changes that class's voxels alone, so each class's Dice under its rule does not
depend on the other classes' rules: four label maps per case (none, foreground, each with every
class's rule) give every Dice the decision needs, and a case is scored once, as it is predicted,
whatever the number of cases. A region's rule changes the voxels of each of its label values, so
the Dice of the regions that share them: each region is tried on top of the rules kept before
it, as nnU-Net does, with every case scored again per region (`rescore`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from segnet.data.regions import Regions
from segnet.inference.component_rules import TRIALS, Rules
from segnet.metrics import mean_per_class, nanmean


def decide(per_case: Iterable[dict[str, list[float]]]) -> tuple[Rules, dict[str, list[float]]]:
    """The rules, from every case's case_scores, and the mean Dice per class of each trial and of
    the rules chosen."""
    cases = list(per_case)
    means = {name: mean_per_class([case[name] for case in cases]) for name in TRIALS}
    foreground = nanmean(means["foreground"]) > nanmean(means["none"])
    before = means["foreground" if foreground else "none"]
    after = means["foreground and classes" if foreground else "classes"]
    classes = tuple(c for c in range(1, len(before) + 1) if after[c - 1] > before[c - 1])
    chosen = [after[c - 1] if c in classes else before[c - 1] for c in range(1, len(before) + 1)]
    return Rules(foreground, classes), {**means, "chosen": chosen}


def decide_regions(per_case: Iterable[dict[str, list[float]]], regions: Regions, names: Sequence[str],
                   rescore: Callable[[Rules], list[list[float]]]) -> tuple[Rules, dict[str, list[float]]]:
    """The rules of a region-based dataset, from every case's case_scores (none and foreground)
    and `rescore` (every case's Dice per region under a set of rules), and the mean Dice per region
    of each trial (a region's named by it) and of the rules chosen."""
    cases = list(per_case)
    means = {name: mean_per_class([case[name] for case in cases]) for name in TRIALS[:2]}
    rules = Rules(foreground=nanmean(means["foreground"]) > nanmean(means["none"]))
    kept = means["foreground" if rules.foreground else "none"]
    for index, (values, name) in enumerate(zip(regions.values, names, strict=True)):
        trial = replace(rules, regions=(*rules.regions, values))
        means[f"largest component of {name}"] = scores = mean_per_class(rescore(trial))
        if scores[index] > kept[index]:
            rules, kept = trial, scores
    return rules, {**means, "chosen": kept}
