"""The result of a flow solve: `FlowSolution` (a JAX pytree that pickles), `MaxStepsReached`,
diffrax's result codes, and the recorded settings that rebuild a loaded solution's dense output.

`FlowSolution` delegates its derived quantities (`M`, `W`, `z`, `mu`, `loss`) to its form object
(`nqf.solvers._forms`). Times are gradient-flow times t = eta * steps.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core._checks import any_traced
from .._core._config import require_x64
from .._core._errors import MaxStepsReached
from .._core.io import Saveable
from ..data._model import NQFModel
from ..data._network import PrecisionWarning
from ..data._operators import AbstractCommutingData, AbstractData
from ..dynamics._flow import loss_of
from ..dynamics._glv import excess_loss as _excess_loss
from ..dynamics._glv import glv_equilibrium
from ._events import Stop
from ._forms import FORMS, convert, plain_method

__all__ = ["FlowSolution", "MaxStepsReached"]

_NO_DENSE = "This solution has no dense output: it was solved with `dense=False`."


_RESULT_STR = {int(item._value): str(item) for item in diffrax.RESULTS._name_to_item.values()}
_CODE_OF = {v: k for k, v in _RESULT_STR.items()}
_MAX_STEPS_CODE = int(diffrax.RESULTS.max_steps_reached._value)
_SUCCESS_CODE = int(diffrax.RESULTS.successful._value)


@eqx.filter_jit
def _evaluate(sol, t):
    return jax.vmap(sol.evaluate)(t)


def _host(x):
    """`x` as numpy arrays on the host, unless it is traced (then as it is)."""
    if type(x) is np.ndarray:  # already on the host (the common case of a concrete solution)
        return x
    if x is None or any_traced(x):
        return x
    return jax.tree.map(np.asarray, x)


_STAT_NAMES = ("num_steps", "num_accepted_steps", "num_rejected_steps")

# A loss above this is past the square root of float64's range (1.8e308): the squares and
# products of residuals that the flow, its loss and its derivatives form overflow, so such a
# result has no correct digits to rely on (issue 36 B13).
LOSS_OVERFLOW = 1e150


def warn_if_huge(loss):
    """`loss` (returned as it is), with an `nqf.data.PrecisionWarning` when a concrete, finite
    value exceeds `LOSS_OVERFLOW`."""
    if type(loss) is np.ndarray and loss.size:
        finite = np.abs(loss[np.isfinite(loss)])
        if finite.size and finite.max() > LOSS_OVERFLOW:
            warnings.warn(
                f"The loss reaches {finite.max():.3g}, past {LOSS_OVERFLOW:.0e} (the square root of float64's range): "
                "squares and products of the residuals overflow, so the result is not reliable. Rescale the labels "
                "y (and the data): the flow is covariant under y -> c y, M -> c M, t -> t / c.",
                PrecisionWarning,
                stacklevel=3,
            )
    return loss


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["ts", "ys", "data", "init", "_info", "_y0", "_dfx", "_mask", "model", "stop_time"],
    meta_fields=[
        "form",
        "init_is_factor",
        "max_steps",
        "_redo",
        "d",
        "init_is_z",
        "saved",
        "method",
        "_extra_stats",
        "_stop_name",
        "settings",
    ],
)
@dataclasses.dataclass(frozen=True, eq=False)
class FlowSolution(Saveable):
    """Result of `solve_flow`: a JAX pytree (its arrays are the leaves), so a solve inside
    `jax.jit` / `jax.vmap` can return it, and it pickles.

    Times are gradient-flow times (t = eta * GD steps). `n` below is the number of saved times.

    **Attributes:**

    - `ts`: saved times, shape (n,).
    - `form`: the form that was integrated (``"M"``, ``"factor"``, ``"glv"`` or ``"M-mu"``).
    - `ys`: the raw saved state: M (n, p, p), F (n, p, r), log z (n, p) for ``"glv"``, or the
      pair (M (n, p, p), mu (n, p)) for ``"M-mu"``; with ``save="loss"`` a dict of (n,) arrays;
      `saved`: ``"state"`` or ``"loss"`` (the `save` argument).
    - `save(path)`: write the solution to disk (`nqf.io`; read it back with `nqf.load`).
    - `data`: the data set whose flow was integrated (for an `NQFModel` with f0 but no g, B solved
      in another form: its data with labels y - f0, the same flow).
    - `stats`: solver statistics {num_steps, num_accepted_steps, num_rejected_steps, max_steps}
      (plus nfev, njev for ``solver="lsoda"`` and ``"cvode"``; CVODE's step counts are -1, its
      step times `step_times`; with ``accuracy=``: ``global_error``, the estimated global
      relative error of the saved z or M, ``rtol`` chosen and ``accuracy_solves``, see
      `solve_flow`); `result`: diffrax's result message (under
      tracing: its integer code); `successful`: True if the solve reached t1.
    - `model`: the `NQFModel` that was passed (None for a bare data set); `d`: the width used by
      the ``"M-mu"`` form (None for the other forms); `method`: ``"ode"`` or ``"exact"``.
    - `settings`: the solver settings of the call ((name, value) pairs: form, solver, stiff,
      tolerances, t0, t1, ...), kept by `save`/`nqf.load` so that a loaded solution can rebuild
      its dense output by solving again.
    - `stop_time`, `stop_reason`: with `stop=`, the time the condition first held (inf if never
      before t1) and its name (None if it never held); then `ts` and the saved quantities keep
      only the saved times up to `stop_time` (under tracing all n entries are kept, those after
      `stop_time` being inf). None without `stop`.

    Derived (computed on access; numpy arrays, or JAX arrays inside a transformation): `M`
    (n, p, p), `mu` (n, p) (``"M-mu"`` only, else None), `W` (n, p, r), `z` (n, p) for
    commuting data, `loss` (n,) (from the model outputs f_x), `z_inf` (p,) and `excess_loss`
    (n,) for commuting data without g, B, f0 (None otherwise).
    """

    _unsaved_fields = ("_dfx", "_redo")  # dense output: rebuilt on first use after `nqf.load`

    def _after_load(self) -> None:
        object.__setattr__(self, "_dfx", None)
        object.__setattr__(self, "_redo", _dense_by_resolving(self))

    ts: Any
    form: str
    ys: Any
    data: AbstractData
    init: Any
    init_is_factor: bool
    _info: Any  # int (5,): result code, num_steps, accepted, rejected, all saved values finite
    max_steps: int = 0
    _y0: Any = dataclasses.field(repr=False, default=None)
    _dfx: Any = dataclasses.field(repr=False, default=None)
    _redo: Any = dataclasses.field(repr=False, default=None)
    _mask: Any = dataclasses.field(repr=False, default=None)
    model: NQFModel | None = None
    d: int | None = None
    init_is_z: bool = False
    saved: str = "state"
    method: str = "ode"
    _extra_stats: tuple = dataclasses.field(repr=False, default=())
    stop_time: Any = None
    _stop_name: str | None = dataclasses.field(repr=False, default=None)
    settings: tuple = dataclasses.field(repr=False, default=())

    @property
    def stop_reason(self) -> str | None:
        """The name of the `stop` condition that ended the solve, or None (no `stop`, or it never
        held before t1). Under tracing: the condition's name whenever one was given."""
        if self.stop_time is None or self._stop_name is None:
            return None
        if any_traced(self.stop_time):
            return self._stop_name
        return self._stop_name if np.isfinite(self.stop_time) else None

    @property
    def stats(self) -> dict:
        """{num_steps, num_accepted_steps, num_rejected_steps, max_steps} (ints; arrays under
        tracing)."""
        info = self._info if any_traced(self._info) else np.asarray(self._info)
        out = {k: (v if any_traced(v) else int(v)) for k, v in zip(_STAT_NAMES, info[1:4])}
        out["max_steps"] = self.max_steps
        out.update(self._extra_stats)
        return out

    @property
    def result(self):
        """diffrax's result message (a string; the integer result code under tracing)."""
        code = self._info[0]
        return code if any_traced(code) else _RESULT_STR[int(code)]

    @property
    def successful(self):
        """True if the solver reached t1 with finite saved values (a bool array under tracing)."""
        ok = (self._info[0] == _SUCCESS_CODE) & (self._info[4] != 0)
        return ok if any_traced(ok) else bool(ok)

    def _state(self):
        require_x64()
        if self.saved != "state":
            dense = self._dfx is not None or self._redo is not None
            raise ValueError(
                f"This solution was solved with save={self.saved!r}: only `loss` and "
                "`excess_loss` were saved. Solve with save='state' for the state"
                + (
                    ", or use the dense output (`evaluate`, `z_at`, `M_at`)."
                    if dense
                    else " (it was also solved with dense=False, so it has no dense output)."
                )
            )
        return self.ys

    @property
    def _general(self) -> bool:
        """True if the outputs are not Tr[M A] alone (M-mu form of a model with g, B or f0)."""
        m = self.model
        return self.form == "M-mu" and m is not None and (m.has_mean_field or m.f0 is not None)

    def _P(self):
        return None if self.data.P is None else jnp.asarray(self.data.P)

    @property
    def form_object(self):
        """The form object of `form` (`nqf.MForm`, `FactorForm`, `GLVForm` or `MMuForm`): it
        owns the conversions of the saved states to M, W, z and the outputs."""
        return FORMS[self.form]

    # -- state transforms (JAX: they run on saved states, dense output, and under tracing) --
    def _W_from(self, y):
        return convert(self, "W", y)

    def _M_from(self, y):
        return convert(self, "M", y)

    def _z_from(self, y):
        return convert(self, "z", y)

    @functools.cached_property
    def M(self):
        """Order parameter M(t) = W W^T at the saved times, shape (n, p, p)."""
        return _host(self._M_from(self._state()))

    @functools.cached_property
    def mu(self):
        """Order parameter mu(t) = W 1 at the saved times, shape (n, p) (``"M-mu"`` form only;
        None for the other forms)."""
        return _host(self._state()[1]) if self.form == "M-mu" else None

    @functools.cached_property
    def W(self):
        """A factor W(t) with W W^T = M(t), shape (n, p, r). Available for the factor form and,
        when the initial condition was a factor W0, for the GLV form (W(t) = Q(t) W0)."""
        return _host(self._W_from(self._state()))

    @functools.cached_property
    def z(self):
        """Mode strengths z_k(t) = (P^T M(t) P)_kk for commuting data, shape (n, p); else None."""
        if not isinstance(self.data, AbstractCommutingData):
            return None
        return _host(self._z_from(self._state()))

    @functools.cached_property
    def loss(self):
        """MSE loss (1/m) sum_x (f_x - y_x)^2 at the saved times, shape (n,); f_x = Tr[M A_x]
        or, for the ``"M-mu"`` form of a model, the model outputs (Eq. E2). A solve with
        ``loss=`` (`solve_flow`): that loss, the mean over inputs of ell (`nqf.dynamics._losses`).
        Warns `nqf.data.PrecisionWarning` when a value exceeds 1e150 (`LOSS_OVERFLOW`: products of
        the residuals overflow float64 there, so the value is not reliable)."""
        require_x64()
        if self.saved == "loss":
            return warn_if_huge(_host(self.ys["loss"]))
        # eager, not `convert`: the same rounding as the dense-output loss of `nqf.plateau_levels`
        # and friends (a compiled, fused mean differs in the last ulp)
        f = plain_method(self.form_object, "outputs")(self, self.ys)
        loss = loss_of(self.model)
        if loss is not None:  # a `WithLoss` model: the mean over inputs of its ell
            return warn_if_huge(_host(jax.vmap(lambda fx: jnp.mean(loss.value(fx, self.data.y)))(jnp.asarray(f))))
        return warn_if_huge(_host(jnp.mean((f - self.data.y) ** 2, axis=-1)))

    @functools.cached_property
    def z_inf(self):
        """z(inf), the GLV equilibrium (`nqf.glv_equilibrium`), for commuting data without g, B,
        f0; else None. With weight decay gamma > 0 (nqf's penalty gamma/2 |W|^2: z' gains
        -2 gamma z) the limit is max((r_k - 2 gamma) / C_kk, 0) for orthogonal features
        (`DiagonalData`, or `CommutingData` whose Lambda^T Lambda is diagonal, checked for
        p <= 4096); for other commuting data it is not computed (None)."""
        if not isinstance(self.data, AbstractCommutingData) or self._general:
            return None
        gamma = float(dict(self.settings).get("weight_decay", 0.0) or 0.0)
        if gamma == 0.0:
            return glv_equilibrium(self.data)
        return _decayed_equilibrium(self.data, gamma)

    @functools.cached_property
    def excess_loss(self):
        """L(t) - L(z*) without cancellation (`nqf.excess_loss`; z* = `nqf.glv_equilibrium`, the
        minimizer of the loss, which is `z_inf` without weight decay), shape (n,); commuting data
        only, else None (the infimum of the loss over PSD M is not known in closed form)."""
        if self.saved == "loss":
            return _host(self.ys.get("excess_loss"))
        if self.z is None or not isinstance(self.data, AbstractCommutingData) or self._general:
            return None
        # against the unpenalized minimizer z* (as the in-solve ``save="loss"`` path), also with
        # weight decay, whose limit `z_inf` lies above it
        return _excess_loss(self.data, self.z, glv_equilibrium(self.data))

    # -- dense output -----------------------------------------------------------------------
    def evaluate(self, t):
        """Raw state at time(s) t by the dense interpolation; shape (len(t), ...).

        **Raises:** `ValueError` for times outside [t0, t1] (checked for concrete t; under
        tracing the interpolant extrapolates) or a solution without dense output; `RuntimeError`
        if JAX's float64 was turned off after importing nqf."""
        require_x64()
        interp = self._interp
        if any_traced(t) or any_traced(interp):
            return jax.vmap(interp.evaluate)(jnp.atleast_1d(jnp.asarray(t, dtype=jnp.float64)))
        tn = np.atleast_1d(np.asarray(t, dtype=np.float64))
        t0, t1 = float(interp.t0), float(interp.t1)
        if not np.all((tn >= t0) & (tn <= t1)):
            raise ValueError(
                f"`t` must lie in the solved interval [t0, t1] = [{t0:g}, {t1:g}]; found range "
                f"[{tn.min():g}, {tn.max():g}] (dense output does not extrapolate)."
            )
        if getattr(interp, "host", False):
            return interp.evaluate(tn)
        return jax.tree.map(np.asarray, _evaluate(interp, jnp.asarray(tn)))

    def z_at(self, t):
        """z(t) from dense interpolation for commuting data, shape (len(t), p)."""
        require_x64()
        if not isinstance(self.data, AbstractCommutingData):
            raise ValueError("`z_at` needs commuting data (a `CommutingData`).")
        return _host(self._z_from(self.evaluate(t)))

    def M_at(self, t):
        """M(t) from dense interpolation, shape (len(t), p, p)."""
        require_x64()
        return _host(self._M_from(self.evaluate(t)))

    def mu_at(self, t):
        """mu(t) from dense interpolation, shape (len(t), p) (``"M-mu"`` form only)."""
        require_x64()
        if self.form != "M-mu":  # before evaluating: the error names the form, not dense output
            self.form_object.mu(self, None)
        return _host(self.form_object.mu(self, self.evaluate(t)))

    @functools.cached_property
    def _interp(self):
        if self._dfx is not None:
            return self._dfx
        if self._redo is None:
            raise ValueError(_NO_DENSE)
        return self._redo()

    @property
    def step_times(self) -> np.ndarray:
        """Times of the accepted solver steps (from the dense interpolation), shape (steps + 1,).
        For ``method="exact"`` the dense output is one closed-form piece: [t0, t1]."""
        if self.method == "exact":
            return np.array([float(self._dfx.t0), float(self._dfx.t1)])
        if getattr(self._interp, "host", False):
            return self._interp.step_ts
        ts = np.asarray(self._interp.interpolation.ts)
        return ts[np.isfinite(ts)]


def _decayed_equilibrium(data: AbstractCommutingData, gamma: float):
    """z(inf) of the GLV flow with weight decay gamma (z' = (r - 2 gamma) z - C z^2 per mode) for
    orthogonal features; None where the features are not (known to be) orthogonal."""
    from ..data._operators import DiagonalData

    if not isinstance(data, DiagonalData):
        Lam = getattr(data, "Lambda", None)
        if Lam is None or Lam.shape[1] > 4096:
            return None
        G = np.asarray(Lam).T @ np.asarray(Lam)
        off = G - np.diag(np.diag(G))
        if np.abs(off).max(initial=0.0) > 1e-10 * max(np.abs(np.diag(G)).max(initial=0.0), 1e-300):
            return None
    r = 8.0 / data.m * np.asarray(data.pullback(data.y))
    C = 8.0 / data.m * np.asarray(data.feature_norms())
    safe = np.where(C > 0, C, 1.0)
    return np.where(C > 0, np.maximum((r - 2.0 * gamma) / safe, 0.0), 0.0)


def _settings(form: str, call, t0, t1, max_steps, weight_decay, stop) -> tuple:
    """The call's solver settings as (name, value) pairs of plain values (what `save` keeps to
    rebuild dense output by solving again, through `solve_flow`'s keyword aliases); `call` is the
    resolved `nqf.solvers._spec.Call`. A solver instance or a user `Stop.when` function is
    recorded as unavailable."""

    def plain(x):
        if x is None or type(x) in (bool, str, int, float):  # the common case, without a pytree walk
            return x
        if any_traced(x):
            return None
        if isinstance(x, (bool, str, int)):
            return x
        try:
            return float(x)
        except (TypeError, ValueError):
            return None

    stop_rec = None
    if isinstance(stop, Stop):
        stop_rec = ("unavailable",) if stop.fn is not None else (stop.kind, plain(stop.value), stop.k)
    solver = call.solver if not call.constant else "unavailable"  # ConstantStepSize: not rebuilt by keywords
    return (
        ("form", form),
        ("solver", solver if solver is None or isinstance(solver, str) else "unavailable"),
        ("stiff", bool(call.stiff)),
        ("t0", plain(t0)),
        ("t1", plain(t1)),
        ("rtol", plain(call.rtol)),
        ("atol", plain(call.atol)),
        ("pcoeff", plain(call.pcoeff)),
        ("icoeff", plain(call.icoeff)),
        ("dt0", plain(call.dt0)),
        ("max_steps", plain(max_steps)),
        ("weight_decay", plain(weight_decay)),
        ("save", call.save),
        ("method", "exact" if call.backend == "exact" else "ode"),
        ("adjoint", call.adjoint),
        ("stop", stop_rec),
    )


def _dense_by_resolving(sol: FlowSolution):
    """The `_redo` of a loaded solution: solve again with its recorded settings, dense output on,
    and return the interpolant (None-safe: raises a clear error if the settings are incomplete)."""
    return functools.partial(_resolve_interp, sol)


# The front end, registered by `nqf.solvers._solve` (which imports this module; not the reverse).
_FRONT_END: dict = {}


def _resolve_interp(sol: FlowSolution):
    solve_flow = _FRONT_END["solve_flow"]
    kw = dict(sol.settings)
    if not kw or kw.get("solver") == "unavailable" or kw.get("stop") == ("unavailable",):
        raise ValueError(
            "This loaded solution cannot rebuild its dense output: it was solved with a solver instance "
            "or a user stop function, which are not saved. Its saved arrays are complete; solve again "
            "with solve_flow for dense output."
        )
    stop = kw.pop("stop")
    if stop is not None:
        kind, value, k = stop
        stop = Stop(kind, value, k=k, name="loss_below" if kind == "loss_below" else sol._stop_name or "")
    if kw["form"] == "M-mu":
        init = {"W0": sol.init} if sol.init_is_factor else {"M0": sol.init, "mu0": sol._y0[1], "d": sol.d}
    elif sol.init_is_z:
        init = {"z0": sol.init}
    else:
        init = {"W0" if sol.init_is_factor else "M0": sol.init}
    data = sol.data if sol.model is None else sol.model
    again = solve_flow(data, **init, ts=sol.ts, dense=True, stop=stop, **kw)
    return again._interp
