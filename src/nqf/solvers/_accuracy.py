"""A global accuracy a user can ask for: the ``accuracy`` option of `solve_flow` and
`solve_sweep` (issue 36).

Adaptive solvers (diffrax's PID controller, LSODA, CVODE) bound the local error of each step; the
global error of the saved states is not controlled and is typically 3 to 100 times rtol (Fig. 3,
Tsit5: 3-5x; LSODA / CVODE at rtol 1e-10: 130-830x). With ``accuracy=a`` the front end picks the
tolerance itself: it solves at decreasing rtol and estimates the global error of its tightest
solve from the difference between the last two (a two-tolerance estimate), until the estimate is
at most `a`.

**Error measure.** The relative error of the saved states, max over the saved times t of
|x(t) - x_true(t)| / |x_true(t)|, where x is the mode strengths z(t) (p,) for commuting data
(Euclidean norm) and the order parameter M(t) (p, p) otherwise (Frobenius norm; in the factor
form computed from W's r x r products, without forming M). Only the saved times `ts` enter;
a stop condition's time (`stop_time`) is not estimated.

**Estimate.** Solvers with tolerance proportionality have a global error e(r) ~ K r^alpha at
rtol r. Two solves at r1 > r2 differ by d ~ e(r1) - e(r2), so e(r2) ~ d / ((r1/r2)^alpha - 1).
nqf takes alpha = 5/6, the exponent of an order-5 method whose local error per step is held at
rtol (global error ~ rtol^(5/(5+1))); solvers whose error shrinks faster (alpha ~ 1: Tsit5 on
Fig. 3) make the estimate conservative by up to 1.6x at r1/r2 = 10.

**Algorithm.** Solve at r = min(a, 1e-3) and r / 10; while the estimate exceeds a / 4, solve
again at r_next = 0.5 r (a / (4 estimate))^(1/alpha), clipped to [r / 10^4, r / 3] and to
>= 1e-14 (the tightest rtol float64 solves support), and estimate from the last two solves. The
factor 4 is a safety margin: on Fig. 3, the MLP problem and the power law (rtol 1e-3 .. 1e-13,
ratios 3, 10, 30) the true error of the tighter solve was 0.14 to 4.9 times the estimate
(median 0.7), so stopping at a / 4 meets the target where the estimate comes out low. At most
`MAX_SOLVES` solves; a target that is not met raises `ValueError` naming `accuracy`. Sweeps
share one rtol: the loop runs until every successful member's estimate meets a / 4. The
reported estimate is the plain one, without the margin.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from .._core._checks import any_traced, real_scalar
from ._backends import Exact
from ._solution import FlowSolution

__all__ = ["with_accuracy", "relative_change"]

ALPHA = 5.0 / 6.0  # assumed exponent of the global error in rtol (module docstring)
RTOL_MIN = 1e-14  # the tightest rtol the loop tries
ACCURACY_MIN = 1e-13  # below this float64 solves cannot verify an estimate
MAX_SOLVES = 6
FIRST_RATIO = 10.0  # r1 / r2 of the first pair
SAFETY = 4.0  # stop when the estimate is <= accuracy / SAFETY (module docstring)


def check_accuracy(accuracy, kwargs: dict) -> float:
    """`accuracy` as a float in [1e-13, 1), and the call's other settings compatible with it.

    **Raises:** `TypeError` for a non-real `accuracy` or traced arguments; `ValueError` for a value
    out of range, `rtol` / `atol` / `stepsize_controller` or a sweep's `checkpoint` given too,
    ``save="loss"``, or the exact backend."""
    a = real_scalar(accuracy, "accuracy", "in [1e-13, 1)")
    if not (math.isfinite(a) and ACCURACY_MIN <= a < 1.0):
        raise ValueError(
            f"`accuracy` (the global relative error to reach) must be finite and in [{ACCURACY_MIN:g}, 1): "
            f"float64 solves round at ~1e-14 per step, so a smaller target cannot be met or checked; found {a!r}."
        )
    clash = [k for k in ("rtol", "atol", "stepsize_controller") if kwargs.get(k) is not None]
    if clash:
        raise ValueError(
            f"`accuracy` picks the tolerances itself; drop `{clash[0]}` (give `accuracy`, or `rtol` / `atol` / "
            "`stepsize_controller`, not both)."
        )
    saveat = kwargs.get("saveat")
    if kwargs.get("save", getattr(saveat, "what", "state")) != "state":
        raise ValueError("`accuracy` measures the error of the saved state: use save='state' (the default).")
    if kwargs.get("checkpoint") is not None:  # each solve has its own rtol: a checkpoint holds one
        raise ValueError(
            "`accuracy` runs the sweep at several tolerances, and a `checkpoint` directory keeps one "
            "solve: drop `checkpoint`, or checkpoint a sweep at a fixed `rtol`."
        )
    if kwargs.get("method") == "exact" or isinstance(kwargs.get("solver"), Exact):
        raise ValueError("`accuracy` chooses the tolerance of an ODE solve; the exact backend has none: drop it.")
    return a


def with_accuracy(fn):
    """Decorate a front end (`solve_flow`, `solve_sweep`) with the keyword option ``accuracy``:
    None (default) calls `fn` as it is; a float runs `solve_to_accuracy` with calls of `fn` at
    ``rtol=r``. The signature shown is `fn`'s (``accuracy`` is read from the keyword options,
    like ``loss``: the public signatures stay at 14 parameters)."""

    @functools.wraps(fn)
    def front_end(*args, accuracy=None, **kwargs):
        if accuracy is None:
            return fn(*args, **kwargs)
        if any_traced((args, kwargs, accuracy)):
            raise TypeError(
                f"`accuracy` runs several solves and picks the next tolerance on the host, so {fn.__name__} "
                "with `accuracy` cannot run inside jax.jit / vmap / grad; solve with a fixed `rtol` there."
            )
        target = check_accuracy(accuracy, kwargs)
        return solve_to_accuracy(lambda r: fn(*args, rtol=r, **kwargs), target)

    return front_end


def solve_to_accuracy(solve, accuracy: float):
    """The solution of the tightest of a few calls ``solve(rtol)``, the first whose estimated
    global error is at most `accuracy` / `SAFETY` (module docstring), with the estimate in its
    `stats`.

    **Raises:** `ValueError` naming `accuracy` if `MAX_SOLVES` solves or rtol = 1e-14 do not meet it."""
    r_prev, r = min(accuracy, 1e-3), min(accuracy, 1e-3) / FIRST_RATIO
    prev, sol = solve(r_prev), solve(r)
    for n in range(2, MAX_SOLVES + 1):
        est = relative_change(prev, sol) / ((r_prev / r) ** ALPHA - 1.0)
        ok = np.isfinite(est)
        worst = float(est[ok].max()) if ok.any() else 0.0  # failed sweep members (throw=False): NaN
        if worst <= accuracy / SAFETY:
            return _with_estimate(sol, est, r, n)
        if n == MAX_SOLVES or r <= RTOL_MIN:
            raise ValueError(
                f"`accuracy={accuracy:g}` was not reached in {n} solves: the estimated global error at "
                f"rtol={r:.3g} is {worst:.3g}"
                + (" (the tightest rtol tried)." if r <= RTOL_MIN else ".")
                + " Ask for a looser `accuracy`, or use a higher-order solver (e.g. solver='dopri8')."
            )
        step = 0.5 * (accuracy / (SAFETY * worst)) ** (1.0 / ALPHA)
        r_next = max(min(r * step, r / 3.0), r / 1e4, RTOL_MIN)
        prev, r_prev, r = sol, r, r_next
        sol = solve(r)
    raise AssertionError("unreachable")  # pragma: no cover


def _with_estimate(sol, est: np.ndarray, rtol: float, solves: int):
    """`sol` with its estimate recorded: `FlowSolution`: `stats` gains ``global_error`` (float),
    ``rtol`` and ``accuracy_solves``; `SweepSolution`: the same with ``global_error`` (B,)."""
    extra = {"rtol": float(rtol), "accuracy_solves": int(solves)}
    if isinstance(sol, FlowSolution):
        stats = sol._extra_stats + (("global_error", float(est[0])),) + tuple(extra.items())
        return dataclasses.replace(sol, _extra_stats=stats)
    return dataclasses.replace(sol, stats={**sol.stats, "global_error": est, **extra})


def _saved_state(sol) -> tuple[str, np.ndarray]:
    """(kind, x) of a `FlowSolution` or `SweepSolution`: ``"z"`` with z (B, n, p) for commuting
    data, ``"W"`` with the factor W (B, n, p, r) of the factor form, else ``"M"`` with M
    (B, n, p, p); a `FlowSolution` gets B = 1."""
    batch = (lambda x: np.asarray(x)[None]) if isinstance(sol, FlowSolution) else np.asarray
    if sol.z is not None:
        return "z", batch(sol.z)
    if sol.form == "factor":
        return "W", batch(sol.ys)
    return "M", batch(sol.M)


def relative_change(a, b) -> np.ndarray:
    """max over the saved times of |x_a(t) - x_b(t)| / |x_b(t)|, shape (B,) ((1,) for a
    `FlowSolution`): x the mode strengths z (Euclidean norm) for commuting data, else M
    (Frobenius norm; from W's r x r products in the factor form). Over the saved times common to
    both (a `stop` may end them at slightly different times); NaN for a failed sweep member."""
    kind, xa = _saved_state(a)
    _, xb = _saved_state(b)
    n = min(xa.shape[1], xb.shape[1])
    xa, xb = xa[:, :n], xb[:, :n]
    if kind == "z":
        num, den = np.linalg.norm(xa - xb, axis=-1), np.linalg.norm(xb, axis=-1)
    elif kind == "M":
        num, den = np.linalg.norm(xa - xb, axis=(-2, -1)), np.linalg.norm(xb, axis=(-2, -1))
    else:  # Wa Wa^T - Wb Wb^T = D Wa^T + Wb D^T, D = Wa - Wb: |.|_F^2 from r x r products
        gram = functools.partial(np.einsum, "...ki,...kj->...ij")
        D = xa - xb
        DD, Ga, Gb = gram(D, D), gram(xa, xa), gram(xb, xb)
        sq = np.sum(DD * Ga, axis=(-2, -1)) + np.sum(DD * Gb, axis=(-2, -1))
        sq = sq + 2.0 * np.sum(gram(D, xb) * np.swapaxes(gram(D, xa), -2, -1), axis=(-2, -1))
        num, den = np.sqrt(np.maximum(sq, 0.0)), np.linalg.norm(Gb, axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, 0.0))
    ratio = np.where(np.isnan(num) | np.isnan(den), np.nan, ratio)  # a failed member stays NaN
    return ratio.max(axis=1)
