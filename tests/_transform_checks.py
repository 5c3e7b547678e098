"""Shared by tests/theory/test_oracles_transforms*.py: saved times, tolerances (traced against
plain calls; gradients against central differences), and small helpers."""

import numpy as np

TS = np.array([0.0, 0.5, 1.5, 3.0])
RTOL = 1e-12  # traced vs plain
GTOL = 1e-6  # gradient vs central differences


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / np.abs(b).max())


def central(f, x, h):
    """Central difference of f at x along the step h (a scalar or a vector)."""
    return (f(x + h) - f(x - h)) / (2 * np.abs(h).max())


def random_psd(p, scale, seed):
    W = np.random.default_rng(seed).standard_normal((p, p))
    return scale * (W @ W.T) / p
