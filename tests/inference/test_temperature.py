"""Temperature scaling (segnet.inference.temperature): fitted on overconfident probabilities it
finds the temperature they were made with and calibrates cases it was not fitted on; it never
changes a label; segnet-predict's temperature= is read as a number or a choice's file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from segnet.errors import ConfigError
from segnet.evaluation.calibration import Calibration
from segnet.inference.temperature import fit_temperature, given_temperature, nll, tempered, voxel_sample


def overconfident(voxels: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(classes, voxels) probabilities three times as sharp as the ones the labels are drawn from, and the labels."""
    rng = np.random.default_rng(seed)
    logits = torch.from_numpy(rng.normal(0, 1.5, (3, voxels)))
    truth = torch.multinomial(logits.softmax(0).T, 1, generator=torch.Generator().manual_seed(seed))[:, 0]
    return (3 * logits).softmax(0).float().numpy(), truth.numpy()


def test_a_fitted_temperature_calibrates_cases_it_was_not_fitted_on():
    fit_p, fit_truth = overconfident(20000, 0)
    fitted = fit_temperature(*voxel_sample(fit_p, fit_truth, None, None, seed=0), regions=False)
    assert fitted["temperature"] == pytest.approx(3.0, rel=0.1) and fitted["nll_after"] < fitted["nll_before"]
    held_p, held_truth = overconfident(20000, 1)
    after = tempered(torch.from_numpy(held_p), fitted["temperature"], regions=False).numpy()
    p, t = torch.from_numpy(held_p.T), torch.from_numpy(held_truth)
    assert nll(p, t, fitted["temperature"], False) < 0.8 * nll(p, t, 1.0, False)
    units = [(1,), (2,)]
    before_ece, after_ece = (Calibration.of(q, held_truth, units).foreground_ece() for q in (held_p, after))
    assert after_ece < 0.5 * before_ece


def test_the_temperature_changes_probabilities_and_never_the_labels():
    p, _ = overconfident(500, 2)
    for regions in (False, True):
        q = torch.from_numpy(p)
        assert torch.equal(tempered(q, 1.0, regions), q)
        softened = tempered(q, 2.5, regions)
        assert not torch.allclose(softened, q, atol=1e-3)
        if regions:
            assert torch.equal(softened > 0.5, q > 0.5)
        else:
            assert torch.equal(softened.argmax(0), q.argmax(0)) and torch.allclose(softened.sum(0), torch.ones(500))


def test_the_temperature_is_given_as_a_number_a_choice_or_a_package_s(tmp_path):
    assert given_temperature(None, [None]) == 1.0 and given_temperature(1.5, []) == 1.5
    assert given_temperature(None, [{"3d": 1.3}]) == 1.0  # a package's only where asked for: no measured gain
    assert given_temperature("fitted", [{"3d": 1.3}, None]) == {"3d": 1.3}
    with pytest.raises(ConfigError, match="temperature=fitted: none of the models given records"):
        given_temperature("fitted", [None])
    choice = tmp_path / "best_configuration.json"
    choice.write_text(json.dumps({"temperature": {"2d": 0.9, "3d": 1.2}}))
    assert given_temperature(str(choice), [{"3d": 5.0}]) == {"2d": 0.9, "3d": 1.2}  # what is given wins
    for wrong in (0, str(tmp_path / "missing.json")):
        with pytest.raises(ConfigError, match=f"temperature={wrong}: give"):
            given_temperature(wrong, [])
