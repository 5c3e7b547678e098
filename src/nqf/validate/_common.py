"""What every `nqf validate` check shares: the registry `CHECKS` (`register`), records
(`record`), the error measures, the solver settings and test beds of the built-in checks, and the
runner `validate`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._core._errors import AssumptionError
from ..data import datasets
from ..data._operators import CommutingData

__all__ = [
    "validate",
    "CHECKS",
    "register",
    "record",
    "FLOW_BOUND",
    "NTK_BOUND",
    "relative_error",
    "matrix_relative_error",
    "norm_relative_error",
    "generic_commuting_data",
]

FLOW_BOUND = 1e-8
"""Bound on the maximum relative error of the flow against an oracle."""

NTK_BOUND = 1e-12
"""Bound on the relative error max|Theta - J J^T| / max|J J^T| of the NTK (Eq. E25)."""

# Solver settings of the built-in checks: relative control everywhere (atol far below any state),
# GLV form in log space (its own default atol), 201 saved times (one compiled program per form).
_RTOL = 1e-11
_ATOL_TINY = 1e-250
_NT = 201

CHECKS: list[Callable[[tuple[float, ...]], list[dict]]] = []
"""Registry of checks run by `validate`; each maps the eps values to a list of records."""


def register(fn: Callable[[tuple[float, ...]], list[dict]]):
    """Append `fn` to `CHECKS` (usable as a decorator); returns `fn`."""
    CHECKS.append(fn)
    return fn


def record(name: str, value: float, bound: float, passed: bool | None = None) -> dict:
    """One result: ``{"name", "value", "bound", "passed"}``; `passed` defaults to value <= bound
    (False for NaN)."""
    value = float(value)
    bound = float(bound)
    if passed is None:
        passed = bool(value <= bound)
    return {"name": name, "value": value, "bound": bound, "passed": bool(passed)}


# --------------------------------------------------------------------------------------------
# error measures
# --------------------------------------------------------------------------------------------
_TINY = np.finfo(float).tiny


def relative_error(x, ref) -> float:
    """max |x - ref| / |ref| elementwise (entries where ref = 0 must match exactly)."""
    x, ref = np.asarray(x, float), np.asarray(ref, float)
    err = np.abs(x - ref)
    return float(np.max(np.where(err == 0, 0.0, err / np.maximum(np.abs(ref), _TINY)), initial=0.0))


def matrix_relative_error(M, ref, basis=None) -> float:
    """max_ij |M_ij - ref_ij| / sqrt(ref_ii ref_jj) over a stack (n, p, p) of PSD matrices, after
    an optional change of basis X -> basis^T X basis."""
    M, ref = np.asarray(M, float), np.asarray(ref, float)
    if basis is not None:
        B = np.asarray(basis, float)
        M = np.einsum("ki,nkl,lj->nij", B, M, B)
        ref = np.einsum("ki,nkl,lj->nij", B, ref, B)
    d = np.sqrt(np.maximum(np.einsum("nii->ni", ref), 0.0))
    scale = d[:, :, None] * d[:, None, :]
    err = np.abs(M - ref)
    return float(np.max(np.where(err == 0, 0.0, err / np.maximum(scale, _TINY)), initial=0.0))


def norm_relative_error(M, ref) -> float:
    """max over the stack of |M - ref|_F / |ref|_F."""
    M, ref = np.asarray(M, float), np.asarray(ref, float)
    num = np.linalg.norm((M - ref).reshape(M.shape[0], -1), axis=1)
    den = np.linalg.norm(ref.reshape(ref.shape[0], -1), axis=1)
    return float(np.max(np.where(num == 0, 0.0, num / np.maximum(den, _TINY)), initial=0.0))


# --------------------------------------------------------------------------------------------
# test beds (shared shapes: one compiled flow per form)
# --------------------------------------------------------------------------------------------
THM6_R = (1.0, 0.5, 0.0, -0.25, 0.125)
THM6_C = (1.0, 2.0, 0.5, 1.0, 1.5)


def generic_commuting_data(p: int = 5, m: int = 5, *, seed: int = 0, rotate_basis: bool = False) -> CommutingData:
    """Commuting data without orthogonal features (a genuine GLV, Eq. E13) for Proposition 7:
    Lambda (m, p) standard normal, labels y = Lambda z* with z* = 2^-k (k = 0..p-1) plus noise."""
    rng = np.random.default_rng(seed)
    Lam = rng.standard_normal((m, p))
    y = Lam @ (2.0 ** -np.arange(p)) + 0.1 * rng.standard_normal(m)
    P = datasets._random_orthogonal(p, rng) if rotate_basis else None
    return CommutingData(Lam, y, P)


def _random_psd(p: int, eps: float, seed: int) -> np.ndarray:
    W = np.random.default_rng(seed).standard_normal((p, p))
    return eps * (W @ W.T) / p


def _fmt(eps: float) -> str:
    return f"eps={eps:.0e}"


def _refusal(name: str, fn) -> dict:
    """Run `fn`, which must raise AssumptionError; record its residual against its tol."""
    try:
        fn()
    except AssumptionError as err:
        return record(f"{name} [{err.condition}]", err.residual, err.tol, passed=not err.residual <= err.tol)
    return record(f"{name}: oracle did NOT refuse", 0.0, 0.0, passed=False)


# --------------------------------------------------------------------------------------------
def validate(eps_values=(1e-3, 1e-6, 1e-12), *, progress: Callable[[dict], None] | None = None) -> list[dict]:
    """Run every check in `CHECKS` and return the records.

    **Arguments:**

    - `eps_values`: initial scales eps (M0 ~ eps) of the flow-vs-oracle checks; each > 0.
    - `progress`: optional callable, called with each record as soon as it is measured.

    **Returns:** a list of ``{"name": str, "value": float, "bound": float, "passed": bool}``:
    flow-vs-oracle maximum relative errors over the whole trajectory (bound 1e-8) and, per oracle,
    the residual of a violated assumption (bound: the oracle's tol; passed if it refused).

    **Raises:** `ValueError` for an empty `eps_values` or a non-positive or non-finite eps.
    """
    eps_values = tuple(float(e) for e in np.atleast_1d(np.asarray(eps_values, dtype=float)))
    if not eps_values or not all(np.isfinite(e) and e > 0 for e in eps_values):
        raise ValueError(f"`eps_values` must be a non-empty list of finite values > 0; found {eps_values}.")
    results = []
    for check in list(CHECKS):
        try:
            recs = list(check(eps_values))
        except Exception as err:  # report, never hide the other checks
            recs = [
                record(
                    f"{getattr(check, '__name__', check)}: raised {type(err).__name__}: {err}",
                    float("nan"),
                    float("nan"),
                    passed=False,
                )
            ]
        for rec in recs:
            results.append(rec)
            if progress is not None:
                progress(rec)
    return results
