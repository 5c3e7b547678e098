"""Lazy vs feature learning from how the NQF coefficients scale with the width d (Proposition 9,
App. B.6 of the paper; THEORY sec. 9).

Let g(x) = Theta(d^-alpha_g), A(x) = Theta(d^-alpha_A), B(x) = Theta(d^-alpha_B), with
mu(0), M(0) = O(1) and alpha_g = 1/2 (so that the NTK of Proposition 8, Eq. E25, is Theta(1) at
initialization: its leading term is d g^T g). Along the (M, mu) flow (Eq. E10) mu moves by
O(d^{1/2}) in O(1) time (mu' = -(d v + H mu), d v = O(d^{1/2})), so the terms of E25 change at the
rates d g^T 2 B mu' = O(d^{1 - alpha_B}) and 2 u^T A mu' = O(d^{-alpha_A}): the NTK drift over an
O(1) training time scales as d^e with

    e = max(1 - alpha_B, -alpha_A)                                                   (Prop. 9)

(the two conditions of the paper's proof, "1 - alpha_B < 0" and "-alpha_A < 0"). Lazy training
(constant NTK as d -> inf) if e < 0, i.e. alpha_A > 0 and alpha_B > 1; feature learning (the NTK
changes on the time scale of the loss) if alpha_A = 0 or 1/2 <= alpha_B <= 1.

Note (measured, `nqf validate` check ``proposition9``): for 1/2 <= alpha_B < 1 the drift is not
O(1) as the proposition's text states but grows like d^{1 - alpha_B} (measured slope 0.234 at
alpha_B = 3/4 between d = 10^3 and 10^4, predicted 0.25), which is what e above says.

`width_regime` is the prediction; `ntk_drift` measures |Theta(t) - Theta(t0)|_F / |Theta(t0)|_F
along a solved flow (`FlowSolution`), using `nqf.ntk`; `width_scaled_model` builds the model
with coefficients d^-alpha times given ones, the family the proposition is about.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from .._core._checks import check_width
from ..data._model import NQFModel, as_model
from ..data._operators import AbstractData
from ..solvers._solution import FlowSolution
from ._ntk import ntk

__all__ = ["WidthRegime", "width_regime", "width_scaled_model", "ntk_drift"]

LAZY = "lazy"
FEATURE_LEARNING = "feature learning"


@dataclasses.dataclass(frozen=True)
class WidthRegime:
    """The regime Proposition 9 predicts from the width exponents.

    **Attributes:**

    - `regime`: ``"lazy"`` (the NTK is constant as d -> inf) or ``"feature learning"`` (it
      changes on the time scale of the loss).
    - `drift_exponent`: e = max(1 - alpha_B, -alpha_A): the relative NTK drift
      |Theta(t) - Theta(0)| / |Theta(0)| over an O(1) gradient-flow time scales as d^e
      (e < 0: lazy; e = 0: O(1) drift; e > 0: the drift grows with d, for alpha_B < 1).
    - `alpha_g`, `alpha_A`, `alpha_B`: the exponents given (alpha_B = inf: no B).
    - `limiting_term`: which term of Eq. E25 sets e: ``"B"`` (d g^T B mu', exponent
      1 - alpha_B), ``"A"`` (u^T A mu', exponent -alpha_A) or ``"A and B"`` (equal).
    """

    regime: str
    drift_exponent: float
    alpha_g: float
    alpha_A: float
    alpha_B: float
    limiting_term: str


def _exponent(x, name: str, minimum: float, why: str) -> float:
    real = isinstance(x, int | float | np.integer | np.floating) or (isinstance(x, np.ndarray) and x.shape == ())
    if isinstance(x, bool | np.bool_) or not real:
        raise TypeError(f"`{name}` must be a real number; found {x!r} ({type(x).__name__}).")
    try:
        x = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a real number; found {type(x).__name__}.") from None
    if math.isnan(x) or x < minimum:
        raise ValueError(f"`{name}` must be >= {minimum} ({why}); found {x}.")
    return x


def width_regime(alpha_A: float, alpha_B: float = math.inf, *, alpha_g: float = 0.5) -> WidthRegime:
    """Proposition 9: lazy or feature learning from the width exponents of the NQF coefficients.

    With g(x) = Theta(d^-alpha_g), A(x) = Theta(d^-alpha_A), B(x) = Theta(d^-alpha_B), mu(0),
    M(0) = O(1) and alpha_g = 1/2 (the NTK of Eq. E25 is Theta(1) at initialization), the
    relative NTK drift over an O(1) gradient-flow time scales as d^e, e = max(1 - alpha_B,
    -alpha_A) (the two conditions of the proposition's proof). Lazy if e < 0 (alpha_A > 0 and
    alpha_B > 1), feature learning otherwise (alpha_A = 0 or 1/2 <= alpha_B <= 1). For
    alpha_B < 1 the predicted drift grows as d^{1 - alpha_B} (the paper's text says O(1); the
    measured exponent follows e, see `nqf validate`'s ``proposition9`` records). e is the
    exponent as d -> inf: at finite width the local slope of the drift depends on the model and
    the time window (a new-user trial, alpha_B = 3/4, a random p = 4 model to t = 1: local slopes
    0.41 and 0.29 over d = 1e2..1e4, 0.25 only at 1e4..1e6; to t = 0.1 still 0.38 at 1e6).

    **Arguments:**

    - `alpha_A`: exponent of A(x), >= 0 (the paper's condition against diverging outputs).
    - `alpha_B`: exponent of B(x), >= 1/2; `math.inf` (default) for a model without B.
    - `alpha_g`: exponent of g(x); Proposition 9 assumes 1/2 (any other value is refused).

    **Returns:** a `WidthRegime` (regime, drift exponent e, the exponents, the limiting term).

    **Raises:** `ValueError` for alpha_A < 0, alpha_B < 1/2, NaN, or alpha_g != 1/2 (naming the
    argument and the value found); `TypeError` for a non-numeric exponent.
    """
    alpha_g = _exponent(alpha_g, "alpha_g", -math.inf, "a real number")
    if alpha_g != 0.5:
        raise ValueError(
            "`alpha_g` must be 1/2: Proposition 9 fixes alpha_g = 1/2 so that the initial NTK "
            f"(leading term d g^T g) is Theta(1); found {alpha_g}."
        )
    alpha_A = _exponent(alpha_A, "alpha_A", 0.0, "Proposition 9: outputs stay finite at initialization")
    alpha_B = _exponent(alpha_B, "alpha_B", 0.5, "Proposition 9: outputs and gradients stay finite")
    eB, eA = 1.0 - alpha_B, -alpha_A
    e = max(eB, eA) + 0.0  # no -0.0
    term = "A and B" if eB == eA else ("B" if eB > eA else "A")
    return WidthRegime(LAZY if e < 0 else FEATURE_LEARNING, float(e), alpha_g, alpha_A, alpha_B, term)


def width_scaled_model(
    model: NQFModel | AbstractData, d: int, alpha_A: float, alpha_B: float = math.inf, *, alpha_g: float = 0.5
) -> NQFModel:
    """The model of Proposition 9 at width d: A -> d^-alpha_A A, g -> d^-alpha_g g,
    B -> d^-alpha_B B (labels and f0 kept), from the width-independent coefficients of `model`.

    **Arguments:** `model` (an `NQFModel`, or a data set: g = B = 0), `d` the width (integer
    >= 1), the exponents as in `width_regime` (alpha_B = inf drops B).

    **Returns:** an `NQFModel` of the same structure (the data set's `scaled`, no dense tensor).

    **Raises:** those of `width_regime` for the exponents; `ValueError` for d < 1; `TypeError`
    for a `model` that is neither an `NQFModel` nor a data set.
    """
    width_regime(alpha_A, alpha_B, alpha_g=alpha_g)  # validates the exponents
    d = check_width(d)
    if not isinstance(model, (NQFModel, AbstractData)):
        raise TypeError(f"`model` must be an `NQFModel` or an nqf data set; found {type(model).__name__}.")
    model = as_model(model)
    dd = float(d)
    B = None if (model.B is None or math.isinf(alpha_B)) else model.B * dd**-alpha_B
    g = None if model.g is None else model.g * dd**-alpha_g
    return NQFModel(model.data.scaled(dd**-alpha_A), g=g, B=B, f0=model.f0)


def ntk_drift(
    sol: FlowSolution, model_x: NQFModel | AbstractData | None = None, *, d: int | None = None
) -> Float[np.ndarray, " n"]:
    """The relative NTK drift along a solved flow: |Theta(t) - Theta(t_0)|_F / |Theta(t_0)|_F at
    every saved time t of `sol` (t_0 = sol.ts[0], the first saved time), Theta of Proposition 8
    (Eq. E25, `nqf.ntk`) between the training inputs and `model_x`'s inputs.

    Proposition 9's measured quantity: its maximum over an O(1) time window scales as d^e,
    e = `width_regime(...).drift_exponent`.

    **Arguments:**

    - `sol`: a `FlowSolution` of `solve_flow` saved as states (``save="state"``); for the
      ``"M-mu"`` form (a model with g or B) its (M, mu) and width `sol.d` are used; for the
      other forms mu = 0 (with g = B = 0 it does not enter E25) and M(t) = `sol.M`.
    - `model_x`: the inputs x of Theta(x, x') (an `NQFModel` or a data set with the same p;
      default: the flow's own model / data set, i.e. the training inputs on both sides).
    - `d`: width for the forms other than ``"M-mu"`` (default p + 1; with g = B = 0, d does not
      enter Theta); must not be given for ``"M-mu"`` (the solution's own width is used).

    **Returns:** the drift at `sol.ts`, shape (n,), float64 (0 at the first saved time). Time is
    gradient-flow time t = lr * steps.

    **Raises:** `TypeError` if `sol` is not a `FlowSolution`; `ValueError` for a solution saved
    with ``save="loss"``, an empty solution, a zero NTK at t_0 (the ratio is undefined), a `d`
    given with the ``"M-mu"`` form, or (from `nqf.ntk`) inputs of a different p.
    """
    if not isinstance(sol, FlowSolution):
        raise TypeError(f"`sol` must be a `FlowSolution` (from `nqf.solve_flow`); found {type(sol).__name__}.")
    if sol.saved != "state":
        raise ValueError(f"`sol` must save states (solve_flow(..., save='state')); found save={sol.saved!r}.")
    model = sol.model if sol.model is not None else NQFModel(sol.data)
    M = jnp.asarray(sol.M)
    if M.shape[0] == 0:
        raise ValueError("`sol` has no saved times.")
    p = model.p
    if sol.form == "M-mu":
        if d is not None:
            raise ValueError(f"`d` must not be given for an 'M-mu' solution (it has its own width d = {sol.d}).")
        width = check_width(sol.d)
        mu = jnp.asarray(sol.mu)
    else:
        width = p + 1 if d is None else check_width(d)
        mu = jnp.zeros(M.shape[:2])
    mx = model if model_x is None else model_x
    theta = jax.vmap(lambda Mt, mut: ntk(mx, model, M=Mt, mu=mut, d=width))(M, mu)  # (n, m1, m)
    theta = np.asarray(theta).reshape(theta.shape[0], -1)
    ref = np.linalg.norm(theta[0])
    if not ref > 0:
        raise ValueError(
            f"the NTK at the first saved time t = {float(np.asarray(sol.ts)[0])} is zero (|Theta|_F = {ref}): "
            "the relative drift is undefined."
        )
    return np.linalg.norm(theta - theta[0], axis=1) / ref
