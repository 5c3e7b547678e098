"""The forms of the closed flow as strategy objects (issue 25).

A form is one exact way of writing the MSE gradient flow as an ODE (THEORY Eqs. E8-E13): its
state, vector field, initial state and the conversions of its state to the order parameter M,
a factor W, the mode strengths z and the model outputs. `solve_flow(form=...)` takes a form
object or its name (``"M"``, ``"factor"``, ``"glv"``, ``"M-mu"``: aliases of the objects below),
and `FlowSolution` delegates its derived quantities (`M`, `W`, `z`, `loss`, ...) to its form.
Times are gradient-flow times t = eta * steps.

Each form is an `equinox.Module` without arrays (hashable: part of the compiled program's static
configuration), except `MMuForm.d`, the width, which enters the mu equation as a value.
"""

from __future__ import annotations

import functools
import types
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core._checks import any_traced, is_traced
from ..data._operators import AbstractCommutingData
from ..dynamics._flow import (
    _initial_y0,
    check_form,
    glv_z,
    jac_glv_reduced,
    reduced_log_z,
    rhs_factor,
    rhs_glv,
    rhs_glv_reduced,
    rhs_M,
    rhs_M_mu,
)

__all__ = [
    "AbstractForm",
    "MForm",
    "FactorForm",
    "GLVForm",
    "ReducedGLVForm",
    "MMuForm",
    "JointForm",
    "as_form",
    "convert",
    "FORMS",
]


def plain_method(obj: eqx.Module, name: str):
    """`obj.name` as a plain Python bound method. Attribute access on an `equinox.Module` wraps
    each bound method in a `BoundMethod` module (so that it is a pytree), which costs ~20 us on
    the host; `solve_flow` and `FlowSolution` call form methods on the host once per call or
    property, where that wrapping is pure overhead (issue 34)."""
    return types.MethodType(getattr(type(obj), name), obj)


class AbstractForm(eqx.Module):
    """One form of the closed flow: its name, vector field and state conversions.

    Conversions take the `FlowSolution` `sol` (its data, initial condition and mask) and a batch
    of raw states `y` with a leading time axis (n, ...); they return JAX arrays.
    """

    name: ClassVar[str] = ""
    needs_commuting: ClassVar[bool] = False

    def vector_field(self, t, y, args):
        """dy/dt of this form at gradient-flow time t; args = (data, gamma, mask or d)."""
        raise NotImplementedError

    def check(self, data) -> None:
        """Raise `ValueError` if this form cannot integrate the flow of `data`."""
        check_form(self.name, data)

    def initial(self, kind: str, data, x):
        """(y0, mask): the initial state from the initial condition `x` of kind "M" (p, p),
        "W" (p, d), "z" (p,) or "M-mu" ((p, p), (p,)), or "state": x is (y0, mask) already (a
        sweep's members, built on the host); mask: live modes (GLV form), else None."""
        if kind == "state":
            return x
        return _initial_y0(self.name, kind, data, x)

    def controller_options(self) -> dict:
        """Extra keywords of the PID controller (the joint sweep's error norm); none here."""
        return {}

    def state_size(self, x0, data) -> int:
        """Number of float64 values in the integrated state started from `x0`."""
        return data.p

    def default_atol(self, rtol, y0):
        """The default absolute tolerance: rtol * max|state(0)| (rtol if the state is 0)."""
        scale = functools.reduce(jnp.maximum, [jnp.max(jnp.abs(x)) for x in jax.tree.leaves(y0)])
        return rtol * jnp.where(scale > 0, scale, 1.0)

    def args(self, data, gamma, width, mask):
        """The vector field's args: (data, gamma, mask) (the "M-mu" form: (data, gamma, d))."""
        return (data, gamma, mask)

    # -- conversions of saved states (n, ...) -------------------------------------------------
    def M(self, sol, y):
        """M (n, p, p) = W W^T from the states y."""
        W = self.W(sol, y)
        return jnp.einsum("...ir,...jr->...ij", W, W)

    def W(self, sol, y):
        """A factor W (n, p, r) of M; `ValueError` where the form does not determine one."""
        raise ValueError(
            f"`W` is not available for form={self.name!r} started from M0; use `M`, or solve from a factor `W0`."
        )

    def z(self, sol, y):
        """Mode strengths z (n, p) (commuting data)."""
        return jax.vmap(sol.data.z)(self.M(sol, y))

    def outputs(self, sol, y):
        """Model outputs f_x (n, m) at the states y (Tr[M A_x] unless the model says more)."""
        return jax.vmap(sol.data.traces)(self.M(sol, y))

    def mu(self, sol, y):
        """mu (n, p) = W 1 (the "M-mu" form only; `ValueError` otherwise)."""
        raise ValueError(f"`mu_at` needs the 'M-mu' form; this solution is form={self.name!r}.")


class MForm(AbstractForm):
    """The M form (Eq. E9): the state is M (p, p) itself; any data."""

    name: ClassVar[str] = "M"

    def vector_field(self, t, y, args):
        return rhs_M(t, y, args)

    def state_size(self, x0, data) -> int:
        return data.p * data.p

    def M(self, sol, y):
        return jnp.asarray(y)

    def outputs(self, sol, y):
        return jax.vmap(sol.data.traces)(jnp.asarray(y))


class FactorForm(AbstractForm):
    """The factor form (Eq. E8): the state is a factor F (p, r) with M = F F^T (r = d of W0,
    or p from M0)."""

    name: ClassVar[str] = "factor"

    def vector_field(self, t, y, args):
        return rhs_factor(t, y, args)

    def state_size(self, x0, data) -> int:
        p = data.p
        return p * (x0.shape[1] if x0.ndim == 2 and x0.shape[0] == p and x0.shape[1] != p else p)

    def W(self, sol, y):
        return jnp.asarray(y)

    def z(self, sol, y):
        return jax.vmap(sol.data.z_factor)(jnp.asarray(y))

    def outputs(self, sol, y):
        return jax.vmap(sol.data.traces_factor)(jnp.asarray(y))


class GLVForm(AbstractForm):
    """The GLV form (Eq. E13) of commuting data: the state is u = log z (p,) on the live modes
    (mask z(0) > 0); M(t) = Q M0 Q with Q = P diag(sqrt(z/z0)) P^T (Proposition 7)."""

    name: ClassVar[str] = "glv"
    needs_commuting: ClassVar[bool] = True

    def vector_field(self, t, y, args):
        return rhs_glv(t, y, args)

    def default_atol(self, rtol, y0):
        """rtol: the state u = log z is already relative."""
        return rtol

    def scale(self, sol, logz):
        """s(t) = sqrt(z(t)/z(0)), shape (n, p)."""
        z = glv_z(jnp.atleast_2d(jnp.asarray(logz)), sol._mask)
        z0 = glv_z(jnp.asarray(sol._y0), sol._mask)
        return jnp.sqrt(jnp.where(z0 > 0, z / jnp.where(z0 > 0, z0, 1.0), 0.0))

    def W(self, sol, y):
        P = sol._P()
        if sol.init_is_z:  # W = P diag(sqrt(z)): a factor of M
            W = jnp.sqrt(self.z(sol, y))[:, None, :] * jnp.eye(sol.data.p)
            return W if P is None else jnp.einsum("ij,njr->nir", P, W)
        if sol.init_is_factor:
            Wb = jnp.asarray(sol.init) if P is None else P.T @ sol.init
            out = self.scale(sol, y)[:, :, None] * Wb[None]
            return out if P is None else jnp.einsum("ij,njr->nir", P, out)
        return super().W(sol, y)

    def M(self, sol, y):
        if sol.init_is_factor or sol.init_is_z:
            return super().M(sol, y)
        P = sol._P()
        Mb = jnp.asarray(sol.init) if P is None else P.T @ sol.init @ P
        s = self.scale(sol, y)
        out = s[:, :, None] * Mb[None] * s[:, None, :]
        return out if P is None else jnp.einsum("ik,nkl,jl->nij", P, out, P)

    def z(self, sol, y):
        mask = sol._mask
        if not (is_traced(y) or is_traced(mask)):  # concrete: one compiled call, not three eager ops
            return _exp_jit(y) if np.asarray(mask).all() else _glv_z_jit(y, mask)
        return glv_z(jnp.asarray(y), mask)

    def outputs(self, sol, y):
        return sol.data.outputs_z(self.z(sol, y))


# `glv_z` compiled once per shape (and plain exp when every mode is live, the same values: the
# masked select alone costs ~40 us on the CPU): the conversion of concrete saved states is one
# dispatch (issue 34; three eager device ops took ~150 us). XLA's exp, as in the solve's own
# saved losses, so that `z`, `loss` and `excess_loss` agree with save="loss" to the last bit
# (numpy's exp differs in the last ulp, which the excess loss near its minimum amplifies).
_glv_z_jit = jax.jit(glv_z)
_exp_jit = jax.jit(jnp.exp)


class ReducedGLVForm(GLVForm):
    """The GLV form integrated in m coordinates (`nqf.dynamics.rhs_glv_reduced`; `CommutingData`
    with 2 m < p, stiff): the state is the integrated residual G (m,), from which
    u = log z (p,) = `reduced_log_z`; saved states and dense output are in the GLV form's u.
    `solve_flow` picks it with Rodas5P (``stiff=True``) where it applies; passed as `form=` it
    names the GLV form (``"glv"``)."""

    def vector_field(self, t, y, args):
        return rhs_glv_reduced(t, y, args)

    def integrand(self, plain, gamma, mask, y0, t0, atol, saver, autonomous: bool):
        """(vector field, state0 (m,), args, atol, solver, saver) of the reduced solve: the same
        absolute accuracy on u = log z as `atol` on the GLV form (|du| <= max_k |lambda_k| |dG|)."""
        from .rosenbrock import Rodas5P

        args = (plain, gamma, mask, y0, t0)
        atol = atol / jnp.sqrt(jnp.max(plain.feature_norms()))
        solver = Rodas5P(jacobian=jac_glv_reduced, autonomous=autonomous)
        return rhs_glv_reduced, jnp.zeros(plain.m), args, atol, solver, _reduced_saver(saver)

    def condition(self, cond):
        """A stop condition of the GLV form's u, evaluated on the reduced state G."""
        return lambda t, G, args, **kw: cond(t, reduced_log_z(t, G, args), args[:3], **kw)


def _reduced_saver(saver):
    """SaveAt function of the reduced GLV form: the saved quantity of the GLV form (log z, or
    the losses through `saver`) at the state u = `reduced_log_z`."""

    def fn(t, G, args):
        u = reduced_log_z(t, G, args)
        return u if saver is None else saver(t, u, args[:3])

    return fn


class MMuForm(AbstractForm):
    """The (M, mu) form (Eq. E10) of a general model f = f0 + g^T mu + mu^T B mu + Tr[M A]:
    the state is the pair (M (p, p), mu (p,)); `d` is the width (an integer >= 1) that enters
    the mu equation (None: from `W0`, or the `d=` keyword of `solve_flow`)."""

    name: ClassVar[str] = "M-mu"
    d: int | None = None

    def vector_field(self, t, y, args):
        return rhs_M_mu(t, y, args)

    def initial(self, kind, data, x):
        return x if kind == "state" else (x, None)

    def args(self, data, gamma, width, mask):
        return (data, gamma, width)

    def state_size(self, x0, data) -> int:
        return data.p * data.p + data.p

    def M(self, sol, y):
        return jnp.asarray(y[0])

    def W(self, sol, y):
        raise ValueError(
            "`W` is not available for form='M-mu': the closed flow (Eq. E10) tracks only "
            "M = W W^T and mu = W 1; use `M` and `mu`, or simulate in weight space."
        )

    def z(self, sol, y):
        return jax.vmap(sol.data.z)(self.M(sol, y))

    def mu(self, sol, y):
        return y[1]

    def outputs(self, sol, y):
        m = sol.model
        if m is not None and (m.has_mean_field or m.f0 is not None):
            return jax.vmap(m.outputs)(jnp.asarray(y[0]), jnp.asarray(y[1]))
        return jax.vmap(sol.data.traces)(jnp.asarray(y[0]))


def _member_rms_max(x, axis_name=None):
    """The joint mode's error norm: max over members (leading axis) of each member's RMS norm.

    diffrax's default norm is an RMS over the whole (B, ...) state, which would let one
    member's error hide among B - 1 members with small errors (diluted by up to sqrt(B)); the
    max keeps every member's scaled error below 1, as its own `solve_flow` call does. With
    `axis_name` (inside `shard_map`), the max is also taken over the devices' shards (`pmax`):
    all devices take the same steps. A max is exact in any order, so the result does not
    depend on how members are grouped on devices."""
    leaves = jax.tree.leaves(x)
    b = leaves[0].shape[0]
    sq = sum(jnp.sum(jnp.reshape(leaf, (b, -1)) ** 2, axis=1) for leaf in leaves)
    n = sum(int(np.prod(leaf.shape[1:])) for leaf in leaves)
    out = jnp.max(jnp.sqrt(sq / max(n, 1)))
    return out if axis_name is None else jax.lax.pmax(out, axis_name)


def _joint_rhs(rhs, data_axis, t, Y, args):
    """The joint vector field: `rhs` (one member's) vmapped over the members of the stacked
    state Y (B, ...). With per-member scales s (B,), the state is Y = y / s."""
    data, gamma, mask, scale = args
    f = jax.vmap(rhs, in_axes=(None, 0, (data_axis, None, 0)))
    if scale is None:
        return f(t, Y, (data, gamma, mask))
    s = jnp.reshape(scale, (-1,) + (1,) * (Y.ndim - 1))
    return f(t, Y * s, (data, gamma, mask)) / s


class JointForm(AbstractForm):
    """All B members of a sweep as ONE ODE on the stacked state Y (B, ...) of the member form
    `inner` (`solve_sweep(mode="joint")`): the vector field vmapped over members (data along
    `data_axis`: 0 for a batch of data sets, None for one shared), the state of member i scaled
    by 1 / s_i (s: the ``width`` slot of the core's arguments, or None), and the PID error norm
    the max over members of their RMS norms (`axis_name`: also over devices, in `shard_map`)."""

    inner: AbstractForm
    data_axis: int | None = eqx.field(static=True, default=None)
    axis_name: str | None = eqx.field(static=True, default=None)

    @property
    def name(self):  # the member form's name: its default atol, checks and outputs
        return self.inner.name

    def vector_field(self, t, y, args):
        return _joint_rhs(self.inner.vector_field, self.data_axis, t, y, args)

    def initial(self, kind, data, x):
        y0, mask, scale = x
        return (y0 if scale is None else y0 / jnp.reshape(scale, (-1,) + (1,) * (y0.ndim - 1))), mask

    def args(self, data, gamma, width, mask):
        return (data, gamma, mask, width)

    def controller_options(self) -> dict:
        return {"norm": functools.partial(_member_rms_max, axis_name=self.axis_name)}


FORMS = {"M": MForm(), "factor": FactorForm(), "glv": GLVForm(), "M-mu": MMuForm()}


class _SolutionFields:
    """The fields of a `FlowSolution` that the conversions read, rebuilt inside `_converted`'s
    trace from its arrays and its two flags."""

    def __init__(self, arrays: tuple, init_is_factor: bool, init_is_z: bool):
        self.data, self.init, self._y0, self._mask, self.model = arrays
        self.init_is_factor, self.init_is_z = init_is_factor, init_is_z

    def _P(self):
        return None if self.data.P is None else jnp.asarray(self.data.P)


def _conversion(form: AbstractForm, what: str, sol, y):
    """`what` of the states y by the form's method."""
    return plain_method(form, what)(sol, y)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _converted(form: str, what: str, init_is_factor: bool, init_is_z: bool, arrays: tuple, y):
    return _conversion(FORMS[form], what, _SolutionFields(arrays, init_is_factor, init_is_z), y)


def convert(sol, what: str, y) -> Any:
    """`what` (``"M"``, ``"W"``, ``"z"`` or ``"outputs"``) of the states `y` (a leading
    time axis, n) of the solution `sol`, as JAX arrays: for concrete values one compiled call per
    form, quantity and shapes (issue 34: the eager ops, each dispatched and `vmap` traced per
    call, took 0.4-1.4 ms on Fig. 3); under tracing, and for the GLV form's z (one compiled call
    already), the form's method itself."""
    arrays = (sol.data, sol.init, sol._y0, sol._mask, sol.model if sol.form == "M-mu" else None)
    if (sol.form == "glv" and what == "z") or any_traced(arrays, y):
        return _conversion(FORMS[sol.form], what, sol, y)
    return _converted(sol.form, what, bool(sol.init_is_factor), bool(sol.init_is_z), arrays, y)


def as_form(form) -> tuple[str, int | None]:
    """(name, d) of a form given as an object or a name (``"auto"`` passes through); d is the
    width of an `MMuForm` (else None). `TypeError` / `ValueError` for anything else."""
    if isinstance(form, AbstractForm):
        return form.name, getattr(form, "d", None)
    if isinstance(form, str):
        if form != "auto" and form not in FORMS:
            raise ValueError(f"`form` must be one of {tuple(FORMS)} or 'auto' (or a form object); found {form!r}.")
        return form, None
    raise TypeError(
        "`form` must be a form object (nqf.MForm(), FactorForm(), GLVForm(), MMuForm(d)) or one of "
        f"{tuple(FORMS)} / 'auto'; found {type(form).__name__}."
    )


def is_commuting(data) -> bool:
    return isinstance(data, AbstractCommutingData)
