"""Rodas5P: a linearly implicit (Rosenbrock-Wanner) stiff solver for diffrax, with a pluggable
structured linear solve.

An implicit Runge-Kutta step (Kvaerno) solves a nonlinear system per stage with Newton's method:
on the power-law GLV flow (Eq. E21) that costs 62-98 right-hand sides per step. A Rosenbrock
method replaces the Newton iterations by one linear solve per stage with the same matrix
W = I / (h gamma) - J, J the Jacobian at the start of the step: Rodas5P takes 8 right-hand sides,
8 solves and one Jacobian set-up per step, order 5 with an embedded order-4 error estimate,
stiffly accurate (L-stable) and with a 4th-order dense output (Steinebach 2023, BIT Numer. Math.
63:27, doi:10.1007/s10543-023-00967-x; the coefficients are those of the paper as tabulated in
OrdinaryDiffEq.jl, checked here by the convergence-order tests in tests/test_rosenbrock.py).

The linear solver is any lineax solver acting on the operator O = I - h gamma J (given as a
`lineax.FunctionLinearOperator` of Jacobian-vector products, never materialized unless the solver
does so): `nqf.stiff.DiagonalSolver` for `DiagonalData` (O(p) per step), `nqf.stiff.WoodburySolver`
for commuting data with m < p/2 (identity + rank m), or lineax's dense LU by default. The state
may be any pytree (raveled to a vector unless it is a single array, whose shape is kept: the
stacked (B, p) states of `nqf.solve_sweep`'s joint mode reach the structured solvers as such).

Every NQF flow is autonomous (f(t, y) independent of t); the reduced GLV form with weight decay
is not, and sets `autonomous=False`, which adds the method's time-derivative terms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.flatten_util as jfu
import jax.numpy as jnp
import lineax as lx
import numpy as np
from jaxtyping import Array, Float

__all__ = ["Rodas5P"]

# Rodas5P in the W-transformed form (Hairer & Wanner IV.7): stage i solves
# (I / (h gamma) - J) k_i = f(y0 + sum_j A_ij k_j) + sum_j (C_ij / h) k_j; y1 = y(stage 8) + k_8.
_GAMMA = 0.21193756319429014
_A = (
    (),
    (3.0,),
    (2.849394379747939, 0.45842242204463923),
    (-6.954028509809101, 2.489845061869568, -10.358996098473584),
    (2.8029986275628964, 0.5072464736228206, -0.3988312541770524, -0.04721187230404641),
    (-7.502846399306121, 2.561846144803919, -11.627539656261098, -0.18268767659942256, 0.030198172008377946),
)  # stages 7 and 8 start from the previous stage's point plus k_6, k_7 (stiffly accurate)
_C = (
    (),
    (-14.155112264123755,),
    (-17.97296035885952, -2.859693295451294),
    (147.12150275711716, -1.41221402718213, 71.68940251302358),
    (165.43517024871676, -0.4592823456491126, 42.90938336958603, -5.961986721573306),
    (24.854864614690072, -3.0009227002832186, 47.4931110020768, 5.5814197821558125, -0.6610691825249471),
    (
        30.91273214028599,
        -3.1208243349937974,
        77.79954646070892,
        34.28646028294783,
        -19.097331116725623,
        -28.087943162872662,
    ),
    (
        37.80277123390563,
        -3.2571969029072276,
        112.26918849496327,
        66.9347231244047,
        -40.06618937091002,
        -54.66780262877968,
        -9.48861652309627,
    ),
)
# Stage times t0 + alpha_i h (non-autonomous fields; stages 6-8 sit at t1).
_ALPHA = (0.0, 0.6358126895828704, 0.4095798393397535, 0.9769306725060716, 0.4288403609558664, 1.0)
# Time-derivative weights d_i (sums of the gamma_ij) of stages 1-5 (non-autonomous fields only).
_D = (0.21193756319429014, -0.42387512638858027, -0.3384627126235924, 1.8046452872882734, 2.325825639765069)
# Dense output y(theta) = (1 - theta) y0 + theta (y1 + (1 - theta) (K1 + theta (K2 + theta K3))),
# K_l = sum_j _H[l][j] k_j.
_H = np.array(
    [
        (
            25.948786856663858,
            -2.5579724845846235,
            10.433815404888879,
            -2.3679251022685204,
            0.524948541321073,
            1.1241088310450404,
            0.4272876194431874,
            -0.17202221070155493,
        ),
        (
            -9.91568850695171,
            -0.9689944594115154,
            3.0438037242978453,
            -24.495224566215796,
            20.176138334709044,
            15.98066361424651,
            -6.789040303419874,
            -6.710236069923372,
        ),
        (
            11.419903575922262,
            2.8879645146136994,
            72.92137995996029,
            80.12511834622643,
            -52.072871366152654,
            -59.78993625266729,
            -0.15582684282751913,
            4.883087185713722,
        ),
    ]
)


class RodasInterpolation(diffrax.AbstractLocalInterpolation):
    """Rodas5P's 4th-order dense output on one step [t0, t1] (raveled state, unraveled on
    evaluation)."""

    t0: Float[Array, ""]
    t1: Float[Array, ""]
    y0: Array
    y1: Array
    k: Float[Array, "3 ..."]

    def __init__(self, *, t0, t1, y0, y1, k):
        self.t0, self.t1 = t0, t1
        self.y0, self.y1, self.k = y0, y1, k

    def evaluate(self, t0, t1=None, left: bool = True):
        del left
        if t1 is not None:
            return jax.tree.map(jnp.subtract, self.evaluate(t1), self.evaluate(t0))
        if isinstance(self.y0, jax.Array):
            y0, y1, unravel = self.y0, self.y1, lambda y: y
        else:
            y0, unravel = jfu.ravel_pytree(self.y0)
            y1, _ = jfu.ravel_pytree(self.y1)
        theta = (t0 - self.t0) / jnp.where(self.t1 == self.t0, 1.0, self.t1 - self.t0)
        K1, K2, K3 = self.k
        s = 1.0 - theta
        return unravel(s * y0 + theta * (y1 + s * (K1 + theta * (K2 + theta * K3))))


class Rodas5P(diffrax.AbstractAdaptiveSolver):
    """Rodas5P (Steinebach 2023): 8-stage Rosenbrock-Wanner method, order 5 with an embedded
    order-4 error estimate, stiffly accurate, 4th-order dense output. One Jacobian set-up, 8
    right-hand sides and 8 linear solves per step (no Newton iterations).

    **Arguments:**

    - `linear_solver`: a lineax solver for O x = b with O = I - h gamma J, J given to it as
      Jacobian-vector products (default: lineax's LU on the materialized matrix;
      `nqf.stiff.DiagonalSolver` / `WoodburySolver` for the structured GLV Jacobians).
    - `jacobian`: optional function (t, y, args) -> J, the (n, n) Jacobian of the vector field
      at a state y of shape (n,); given, O is formed from it and LU-factorized (for small
      states whose Jacobian has a cheaper closed form than n Jacobian-vector products, such as
      the reduced GLV form, `nqf.dynamics.rhs_glv_reduced`), and `linear_solver` is not used.
    - `autonomous`: True (default) if the vector field does not depend on t; False adds the
      method's time-derivative terms (one extra Jacobian-vector product in t per step).
    """

    linear_solver: lx.AbstractLinearSolver = lx.AutoLinearSolver(well_posed=True)
    jacobian: Callable | None = None
    autonomous: bool = eqx.field(static=True, default=True)

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar = RodasInterpolation

    def order(self, terms):
        del terms
        return 5

    def init(self, terms, t0, t1, y0, args):
        del terms, t0, t1, y0, args
        return None

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del solver_state, made_jump
        h = t1 - t0
        if isinstance(y0, jax.Array):  # keep the state's shape: structured solvers rely on it
            y0_flat, unravel = y0, lambda y: y
        else:
            y0_flat, unravel = jfu.ravel_pytree(y0)

        def f(y, t=t0):
            out = terms.vf(t, unravel(y), args)
            return out if isinstance(y0, jax.Array) else jfu.ravel_pytree(out)[0]

        hg = h * _GAMMA
        results = []
        if self.jacobian is not None:
            f0 = f(y0_flat)
            J = self.jacobian(t0, unravel(y0_flat), args)
            lu = jax.scipy.linalg.lu_factor(jnp.eye(J.shape[0], dtype=J.dtype) - hg * J)

            def solve(rhs):
                return hg * jax.scipy.linalg.lu_solve(lu, rhs)
        else:
            f0, jvp = jax.linearize(f, y0_flat)
            struct = jax.eval_shape(lambda: y0_flat)
            operator = lx.FunctionLinearOperator(lambda v: v - hg * jvp(v), struct)
            state = self.linear_solver.init(operator, {})

            def solve(rhs):
                x, res, _ = self.linear_solver.compute(state, rhs, {})
                results.append(res)
                return hg * x  # W = O / (h gamma): W^{-1} b = h gamma O^{-1} b

        if self.autonomous:
            dT = None
        else:  # df/dt at (t0, y0)

            def ft(t):
                out = terms.vf(t, unravel(y0_flat), args)
                return out if isinstance(y0, jax.Array) else jfu.ravel_pytree(out)[0]

            dT = jax.jvp(ft, (t0,), (jnp.ones_like(t0),))[1]

        ks = []
        u = y0_flat
        du = f0
        for i in range(8):
            if 0 < i < 6:
                u = y0_flat + sum(a * k for a, k in zip(_A[i], ks))
                du = f(u, t0 + _ALPHA[i] * h)
            elif i >= 6:
                u = u + ks[-1]
                du = f(u, t1)
            rhs = du + sum((c / h) * k for c, k in zip(_C[i], ks)) if i else du
            if dT is not None and i < 5:
                rhs = rhs + (h * _D[i]) * dT
            ks.append(solve(rhs))
        y1_flat = u + ks[-1]
        K = jnp.tensordot(jnp.asarray(_H, y0_flat.dtype), jnp.stack(ks), axes=1)
        dense_info = {"y0": y0, "y1": unravel(y1_flat), "k": K}
        result = diffrax.RESULTS.successful
        for res in results:
            result = diffrax.RESULTS.where(result == diffrax.RESULTS.successful, diffrax.RESULTS.promote(res), result)
        return unravel(y1_flat), unravel(ks[-1]), dense_info, None, result
