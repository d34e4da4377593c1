"""Topology metrics (segnet.topology_metrics) on constructed cases whose answer is known: a ring cut open, a
line broken in two, a hollow cube and a torus in 3D, and the empty conventions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from segnet.topology_metrics import betti_numbers, cldice, topology_scores


def ring(size: int = 32, radius: float = 9.0, width: float = 2.0) -> np.ndarray:
    yy, xx = np.mgrid[:size, :size] - (size - 1) / 2
    return np.abs(np.hypot(yy, xx) - radius) <= width / 2


def test_betti_numbers_of_2d_shapes():
    assert betti_numbers(ring()) == (1, 1)
    cut = ring().copy()
    cut[14:18, 22:] = False  # a gap through the wall on one side
    assert betti_numbers(cut) == (1, 0)
    two = np.zeros((20, 20), bool)
    two[2:6, 2:6] = two[10:14, 10:14] = True
    assert betti_numbers(two) == (2, 0)
    corner = np.zeros((6, 6), bool)
    corner[1, 1] = corner[2, 2] = True  # diagonal neighbours: one component, the background still whole
    assert betti_numbers(corner) == (1, 0)
    assert betti_numbers(np.zeros((5, 5), bool)) == (0, 0)


def test_betti_numbers_of_3d_shapes():
    hollow = np.zeros((10, 10, 10), bool)
    hollow[2:8, 2:8, 2:8] = True
    hollow[4:6, 4:6, 4:6] = False  # a cavity: b2 = 1, no tunnel
    assert betti_numbers(hollow) == (1, 0)
    torus = np.zeros((12, 12, 5), bool)
    torus[2:10, 2:10, 1:4] = True
    torus[4:8, 4:8, :] = False  # a square ring, bored through: one tunnel
    assert betti_numbers(torus) == (1, 1)
    with pytest.raises(ValueError, match="2D or 3D"):
        betti_numbers(np.zeros(5, bool))


def test_cldice_of_a_broken_line_and_a_thick_prediction():
    reference = np.zeros((9, 40), bool)
    reference[4, 2:38] = True  # a one-voxel line: its own skeleton
    assert cldice(reference, reference) == pytest.approx(1.0)
    broken = reference.copy()
    broken[4, 18:22] = False
    # precision 1 (the broken line's skeleton lies in the reference), sensitivity 32/36
    assert cldice(broken, reference) == pytest.approx(2 * (32 / 36) / (1 + 32 / 36))
    thick = np.zeros_like(reference)
    thick[3:6, 2:38] = True  # three times as thick: Dice 0.5, but the same centreline
    assert cldice(thick, reference) > 0.97
    assert math.isnan(cldice(np.zeros_like(reference), np.zeros_like(reference)))
    assert cldice(np.zeros_like(reference), reference) == 0.0


def test_topology_scores_per_class():
    reference = np.zeros((32, 32), np.int64)
    reference[ring()] = 2
    reference[2, 2:30] = 1
    prediction = reference.copy()
    prediction[2, 14:16] = 0  # the line in two pieces
    prediction[14:18, 22:][ring()[14:18, 22:]] = 0  # the ring open
    scores = topology_scores(prediction, reference, [(1,), (2,)])
    assert scores["Betti0 error"] == [1.0, 0.0]
    assert scores["Betti1 error"] == [0.0, 1.0]
    assert 0.9 < scores["clDice"][0] < 1.0 and 0.9 < scores["clDice"][1] < 1.0
