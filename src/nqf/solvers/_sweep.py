"""Batched sweeps: many flows (an eps grid, seeds, a theta grid) in one compiled call.

`solve_sweep` integrates a batch of gradient flows (THEORY Eqs. E9, E13) with the same
right-hand sides (`nqf.dynamics.RHS`), solver, PID controller and default tolerances as
`nqf.solve_flow`, in ONE compiled call, and optionally shards the batch over several JAX
devices. Members are a batch of initial conditions (``eps``: M0 = eps * I, or stacked `M0` /
`W0`; for commuting data mode strengths ``z0``, and ``eps`` alone means z0 = eps, so no p x p
matrix is formed) and/or a batch of data sets of the same type and shapes (seeds, a theta
grid), paired member by member. Implicit solvers get `nqf.stiff`'s structured Newton solve in
the GLV form (`DiagonalData`, or one shared `CommutingData`), as in `solve_flow`. Two ways to
batch (`mode`):

**Joint (``mode="joint"``; the default where it applies).** All members form ONE ODE on the
stacked state Y (B, ...), with the vector field vmapped over members, so there is one adaptive
loop whose step size all members share. The PID controller's error norm is the MAX over members
of each member's RMS norm of the scaled error (diffrax's default, an RMS over the whole state,
would let one member's error hide among the others), so every member's error per step stays
within its tolerance: each member is at least as accurate as its own `solve_flow` call, and the
sweep takes (about) the union of the members' step demands. The norm needs one scalar atol.
The GLV form's default atol is rtol for every member (log space), so ``mode="auto"`` picks the
joint mode for it, and for any sweep given one scalar `atol`. For unequal per-member atol (the
M and factor forms' default, rtol * max|state_i(0)|) ``mode="auto"`` falls back to the vmap
mode; ``mode="joint"`` still works there: it integrates each member's state divided by
s_i = atol_i / max(atol), which turns its tolerance into the shared one exactly (up to rounding
of the rescaling). Stats and the result (success, max steps) are shared: every member reports
the same num_steps, and if the steps run out, all members stop. `sol[i]` re-solves member i
alone (its own steps) on first use of its dense output (`evaluate`, `z_at`, `step_times`).

**Lockstep (``mode="vmap"``).** ``jit(vmap(diffeqsolve))``: each member keeps its own step
sizes, accepts/rejects and step count (its answer is that of its own `solve_flow` call to
rounding), but the loop runs until the member needing the most steps has finished, and finished
members idle. vmap turns the loop's control flow into selects over all members, so on a CPU an
iteration costs 20-30x a single step. A sweep costs about (max steps over members) x (cost of a
batched step), so group members of similar stiffness.

**Sharding.** ``devices="all"`` (or an int n, or a list of devices) places the batch axis on a
one-axis `jax.sharding.Mesh` named ``"batch"`` (`NamedSharding(mesh, PartitionSpec("batch"))`);
the batch is padded to a multiple of the device count with copies of the last member, and the
padding is stripped from the result. Each device runs its shard's loop (`jax.shard_map`). In the
joint mode the error norm's max is also taken over the devices (`lax.pmax`, one collective per
step), so all devices take the same steps as the unsharded solve: a max is exact in any order
and a padded copy does not change it. The same code runs on one CPU, several CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=N`` set before JAX is first imported) or
GPUs; results do not depend on the number of devices (checked bit for bit, both modes, on 2
host devices, for fig3 and for stiff `DiagonalData` sweeps; a sharded stiff Woodbury sweep
differs from the unsharded one by rounding, 1.5e-10 measured).

**Several processes (`jax.distributed`).** After `nqf.distributed.initialize()` in every process,
the same `solve_sweep(..., devices="all")` call in every process shards the members over the
devices of all processes (the mesh over `jax.devices()`): each process builds the members on the
host, places only its own shards (`jax.make_array_from_callback`), runs its part of the one
compiled program, and gathers the result (`jax.experimental.multihost_utils.process_allgather`);
every process gets the full `SweepSolution` (option ``gather="process0"``: process 0 only, the
others get None). The numbers equal those of the same sweep on as many devices in one process
bit for bit (2 processes x 1 CPU device against 1 process x 2 forced devices, both modes,
checked) and those of one device to rounding (3.2e-14 on log z, fig3, 5 members). Before any
collective, the processes compare a hash of every argument (`nqf.solvers._distributed`):
different arguments raise a `ValueError` naming the argument in every process; a process that
does not make the call within `nqf.distributed.initialize`'s ``timeout`` a `TimeoutError`
naming it. ``devices=None`` stays local: each process solves its own sweep, no communication.
The joint mode's per-step max is a collective between processes (gloo over TCP for CPUs), so
across processes prefer ``mode="vmap"`` (64-member fig3 sweep, 2 processes on 2 shared cores:
joint 0.28x, vmap 1.05x the one-process time; `benchmarks/bench_distributed.py`).

**Measured** (2 shared CPU cores, float64; `benchmarks/bench_sweep.py`, docs/performance.md):
a 64-member eps sweep of the Fig. 3 problem (GLV form, eps = 1e-12 .. 1e-2, rtol 1e-10, 201
saved times) in one call, against 64 calls of the compiled `solve_flow` (best of 7
interleaved, 3 plain-script runs and asv): joint mode 7.4-10x (~32 ms against 237-328 ms;
822 shared steps, single solves take 264-456), vmap mode 4.6-6.2x (~51-53 ms). Members agree
with their single solves to 1.25e-9 relative on M (joint; normwise per saved time 5.0e-9, which
is the single solve's own error: against a rtol = 1e-13 reference that member's single solve is
off 4.7e-9, the joint one 2.9e-10) and 5.5e-10 (vmap). The sweep sharded over 2 host devices
equals the unsharded one exactly (both modes); on 2 shared cores it is slower (unsharded /
sharded 0.58 for the joint mode: one collective per step). The first call (trace + compile)
of such a sweep, joint mode, takes ~2.4-2.5 s in a fresh process (cold cache).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._core._checks import as_array, check_flag, check_int, check_positive, check_symmetric, shape_str
from .._core.io import Saveable
from ..data._model import NQFModel
from ..data._operators import AbstractCommutingData, AbstractData, DiagonalData, check_initial_loss
from ..dynamics._flow import check_form
from . import _distributed as _dist
from ._accuracy import with_accuracy
from ._core import _FlowArgs, _FlowConfig, _make_solver, _partition_solver, _solve_core, _solve_filter_jit
from ._forms import FORMS, AbstractForm, JointForm, _joint_rhs, _member_rms_max, as_form  # noqa: F401
from ._initial import _check_mode_strengths, _check_solve_memory, _initial_state, _time_grid
from ._solution import _CODE_OF, _RESULT_STR, _STAT_NAMES, FlowSolution, MaxStepsReached, _dense_by_resolving, _settings
from ._spec import PID, Save, check_options, resolve_call
from .stiff import is_stiff, is_structured

__all__ = ["solve_sweep", "SweepSolution"]

_f64 = functools.partial(jnp.asarray, dtype=jnp.float64)
_FAILED_CODE = int(diffrax.RESULTS.internal_error._value)  # a host-sweep member that raised


# ------------------------------------------------------------------------------------------
# Inputs


def _stack_data(data) -> tuple[list[AbstractData], bool]:
    """(list of members' data sets, batched?) from one data set or a sequence of them."""
    if isinstance(data, NQFModel):
        raise TypeError(
            "`solve_sweep` takes data sets (`DenseData`, `CommutingData`, `LowRankData`), not an "
            "`NQFModel`; pass `model.data` (a model with f0 but no g, B: its data with labels "
            "y - f0), or use `solve_flow` per member for the 'M-mu' form."
        )
    if isinstance(data, AbstractData):
        return [data], False
    if not isinstance(data, Sequence) or isinstance(data, (str, bytes)):
        raise TypeError(
            "`data` must be an nqf data set or a sequence (list/tuple) of data sets of the same "
            f"type and shapes; found {type(data).__name__}."
        )
    datas = list(data)
    if not datas:
        raise ValueError("`data` is an empty sequence; give at least one data set.")
    d0 = datas[0]
    for i, d in enumerate(datas):
        if not isinstance(d, AbstractData):
            raise TypeError(f"`data[{i}]` must be an nqf data set; found {type(d).__name__}.")
        if type(d) is not type(d0):
            raise ValueError(
                f"All data sets of a sweep must have the same type; data[0] is "
                f"{type(d0).__name__} but data[{i}] is {type(d).__name__}."
            )
        s0, si = jax.tree.structure(d0), jax.tree.structure(d)
        if s0 != si:
            raise ValueError(
                f"All data sets of a sweep must have the same structure; data[{i}] differs from "
                "data[0] (e.g. one has a basis `P` and the other not)."
            )
        for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(d0), jax.tree.leaves(d)):
            if jnp.shape(a) != jnp.shape(b):
                name = jax.tree_util.keystr(path).lstrip(".")
                raise ValueError(
                    f"All data sets of a sweep must have the same shapes; `{name}` has shape "
                    f"{shape_str(jnp.shape(a))} in data[0] but {shape_str(jnp.shape(b))} in "
                    f"data[{i}]."
                )
    return datas, True


def _check_eps(eps) -> np.ndarray:
    """`eps` as a 0-d or 1-d array of finite values > 0."""
    e = np.asarray(as_array(eps, "eps", finite=False))
    if e.ndim > 1:
        raise ValueError(f"`eps` must be a scalar or a 1-d array; found shape {shape_str(e.shape)}.")
    if e.size == 0:
        raise ValueError("`eps` is empty; give at least one value.")
    bad = ~(np.isfinite(e) & (e > 0))
    if bad.any():
        i = int(np.argmax(bad.ravel()))
        raise ValueError(f"`eps` must be finite and > 0 (M0 = eps * I); found {float(e.ravel()[i])!r} at index {i}.")
    return e


def _initial_z_batch(p: int, eps, z0):
    """GLV initial mode strengths as a batch (B0, p) and whether it is batched: `z0` ((p,) or
    (B, p), >= 0), times `eps` if given (z0_i = eps_i z0); `eps` alone is z0 = eps (M0 = eps I)."""
    if z0 is None:
        e = _check_eps(eps)
        return np.broadcast_to(e.reshape(-1)[:, None], (e.size, p)), e.ndim == 1
    z = np.asarray(as_array(z0, "z0"))
    if z.ndim not in (1, 2) or z.shape[-1] != p:
        raise ValueError(f"`z0` must have shape ({p},) or a batch (B, {p}); found {shape_str(z.shape)}.")
    if z.shape[0] == 0:
        raise ValueError(f"`z0` is an empty batch; give shape ({p},) or (B, {p}) with B >= 1.")
    _check_mode_strengths(z)
    batched = z.ndim == 2
    z = z if batched else z[None]
    if eps is not None:
        e = _check_eps(eps)
        if batched and e.ndim == 1:
            raise ValueError(
                f"Give `eps` (B,) with one base `z0` ({p},), or a batch `z0` (B, {p}) without `eps` "
                f"(or with a scalar `eps`); found `eps` {shape_str(e.shape)} and `z0` {shape_str(z.shape)}."
            )
        return e.reshape(-1)[:, None] * z, batched or e.ndim == 1
    return z, batched


def _initial_batch(p: int, eps, M0, W0):
    """Initial conditions as a batch: (inits (B0, ...), is_factor, batched?)."""
    if eps is not None:
        if W0 is not None:
            raise ValueError("Give `eps` alone (M0 = eps * I) or with a base `M0` (M0 = eps * M0), not with `W0`.")
        e = _check_eps(eps)
        base = np.eye(p)
        if M0 is not None:
            base = np.asarray(as_array(M0, "M0", ndim=2))
            if base.shape != (p, p):
                raise ValueError(
                    f"With `eps`, `M0` is one base matrix of shape ({p}, {p}) (M0_i = eps_i * M0); "
                    f"found {shape_str(base.shape)}."
                )
        return e.reshape(-1)[:, None, None] * base[None], False, e.ndim == 1
    if (M0 is None) == (W0 is None):
        raise ValueError(
            "Give exactly one initial condition: `eps` (M0 = eps * I), `M0` ((p, p) or a batch "
            "(B, p, p)), `W0` ((p, d) or a batch (B, p, d)) or, for commuting data, `z0` ((p,) or "
            "a batch (B, p))."
        )
    name, x = ("M0", M0) if M0 is not None else ("W0", W0)
    x = np.asarray(as_array(x, name))
    if x.ndim not in (2, 3):
        raise ValueError(
            f"`{name}` must be one initial condition (2-d) or a batch of them (3-d); found shape {shape_str(x.shape)}."
        )
    batched = x.ndim == 3
    x = x if batched else x[None]
    if x.shape[0] == 0:
        raise ValueError(f"`{name}` is an empty batch.")
    if M0 is not None and x.shape[1:] != (p, p):
        raise ValueError(f"`M0` members must have shape ({p}, {p}) to match the data; found {shape_str(x.shape[1:])}.")
    if W0 is not None and (x.shape[1] != p or x.shape[2] == 0):
        raise ValueError(
            f"`W0` members must have shape ({p}, d) with d >= 1 (one column per neuron) to match "
            f"the data; found {shape_str(x.shape[1:])}."
        )
    return x, W0 is not None, batched


def _check_psd_batch(M: np.ndarray, name: str, rtol: float = 1e-10) -> None:
    ev = np.linalg.eigvalsh(M)
    scale = np.maximum(np.abs(ev).max(axis=-1), np.finfo(float).tiny)
    bad = ev[:, 0] < -rtol * scale
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"`{name}[{i}]` must be positive semi-definite (an order parameter M = W W^T); found "
            f"smallest eigenvalue {ev[i, 0]:.3g} (largest |eigenvalue| {scale[i]:.3g})."
        )


@eqx.filter_jit
def _glv_z_batch(data, init, is_factor, data_batched):
    f = (lambda d, x: d.z_factor(x)) if is_factor else (lambda d, x: d.z(x))
    return jax.vmap(f, in_axes=(0 if data_batched else None, 0))(data, init)


def _states(datas, stacked, data_batched, inits, is_factor, form):
    """Batched version of `nqf.solvers._initial._initial_state` (same formulas, vectorized over members).
    Member 0 goes through `_initial_state` itself, which also resolves ``form="auto"``."""
    form, _, _, _ = _initial_state(datas[0], None if is_factor else inits[0], inits[0] if is_factor else None, form)
    if not is_factor:
        check_symmetric(inits, "M0")
        _check_psd_batch(inits, "M0")
    mask = None
    if form == "M":
        y0 = np.einsum("bir,bjr->bij", inits, inits) if is_factor else inits
    elif form == "factor":
        if is_factor:
            y0 = inits
        else:
            ev, V = np.linalg.eigh(inits)
            y0 = V * np.sqrt(np.maximum(ev, 0.0))[:, None, :]
    else:
        z0 = np.asarray(_glv_z_batch(stacked, jnp.asarray(inits), is_factor, data_batched))
        mask = z0 > 0
        y0 = np.where(mask, np.log(np.where(mask, z0, 1.0)), 0.0)
    return form, y0, mask


def _resolve_devices(devices) -> list | None:
    """None (no placement) or the list of devices to shard the batch over."""
    if devices is None:
        return None
    available = jax.devices()
    hint = (
        f"available: {len(available)} device(s) {available}. For several CPU devices, set "
        "XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX is first imported."
    )
    if isinstance(devices, str):
        if devices != "all":
            raise ValueError(f"`devices` must be None, 'all', an int or a list of devices; found {devices!r}.")
        return available
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        if not 1 <= devices <= len(available):
            raise ValueError(f"`devices={devices}` asks for more devices than there are (or < 1); {hint}")
        return available[: int(devices)]
    try:
        devs = list(devices)
    except TypeError:
        raise TypeError(f"`devices` must be None, 'all', an int or a list of devices; found {devices!r}.") from None
    if not devs:
        raise ValueError("`devices` is an empty list.")
    for d in devs:
        if d not in available:
            raise ValueError(f"Device {d!r} is not available to JAX here; {hint}")
    if len(set(devs)) != len(devs):
        raise ValueError(f"`devices` lists a device twice: {devs}.")
    _dist.check_devices_cover_processes(devs)
    return devs


# ------------------------------------------------------------------------------------------
# The compiled batch


class _Problem(NamedTuple):
    """The shared (unbatched) half of a compiled sweep: the core's static configuration (the
    member form, solver, PID coefficients as arrays) and its dynamic arguments without the
    members' data, initial states and atol (`nqf.solvers._core._solve_core`)."""

    cfg: _FlowConfig
    solver: Any  # the solver (both halves; `cfg` and `dyn` hold its static and array parts)
    dyn: _FlowArgs


def _member_args(problem: _Problem, data, y0, mask, atol) -> _FlowArgs:
    """The core's dynamic arguments of one member (or, in the joint mode, of the stacked state)."""
    return problem.dyn._replace(data=data, init=(y0, mask), atol=atol)


def _solve_one(problem: _Problem, data, y0, mask, atol):
    """One member: exactly `solve_flow`'s compiled core (`nqf.solvers._core._solve_core`), dense
    output off; returns (ys (n, ...), info (5,))."""
    out = _solve_core(problem.cfg, _member_args(problem, data, y0, mask, atol))
    return out["ys"], out["info"]


@eqx.filter_jit
def _solve_batch(problem: _Problem, data, data_batched, y0, mask, atol, mesh):
    """The vmap mode: `solve_flow`'s core vmapped over the members (lockstep)."""
    one = functools.partial(_solve_one, problem)
    batched = jax.vmap(one, in_axes=(0 if data_batched else None, 0, 0, 0))
    if mesh is None:
        return batched(data, y0, mask, atol)
    b, rep = PartitionSpec("batch"), PartitionSpec()
    # Each device runs its own shard's adaptive loop (no cross-device sync per step).
    sharded = jax.shard_map(
        batched, mesh=mesh, in_specs=(b if data_batched else rep, b, b, b), out_specs=b, check_vma=False
    )
    return sharded(data, y0, mask, atol)


@eqx.filter_jit
def _solve_joint(problem: _Problem, data, data_batched, y0, mask, atol, scale, mesh):
    """All members as ONE ODE on the stacked state (shared adaptive steps): `solve_flow`'s core
    with the joint form (`nqf.solvers._forms.JointForm`); ys (B, n, ...), info (5,) shared."""

    def joint(data, y0, mask, scale, axis_name=None):
        form = JointForm(FORMS[problem.cfg.form], 0 if data_batched else None, axis_name)
        cfg = problem.cfg._replace(form=form)
        out = _solve_core(cfg, problem.dyn._replace(data=data, init=(y0, mask, scale), atol=atol, width=scale))
        ys = jnp.moveaxis(out["ys"], 0, 1)  # (n, B, ...) -> (B, n, ...)
        if scale is not None:
            ys = ys * jnp.reshape(scale, (-1,) + (1,) * (ys.ndim - 1))
        return ys, out["info"]

    if mesh is None:
        return joint(data, y0, mask, scale)
    b, rep = PartitionSpec("batch"), PartitionSpec()
    # Each device integrates its shard; the error norm's pmax makes all devices share the steps.
    sharded = jax.shard_map(
        functools.partial(joint, axis_name="batch"),
        mesh=mesh,
        in_specs=(b if data_batched else rep, b, b, b),
        out_specs=(b, rep),
        check_vma=False,
    )
    return sharded(data, y0, mask, scale)


def _pad(tree, n: int):
    """Repeat the last member along axis 0 until the batch has n members."""

    def pad(x):
        extra = n - x.shape[0]
        return x if extra == 0 else jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)])

    return jax.tree.map(pad, tree)


# ------------------------------------------------------------------------------------------
# Result


def _member_dense(cfg: _FlowConfig, dyn: _FlowArgs):
    """A sweep member's dense output: its solve alone by the core, dense, with room for its steps."""
    return _solve_filter_jit(cfg, dyn)["dense"]


class Members:
    """The sequence protocol of a sweep of B members: ``len(sweep)``, ``for member in sweep``,
    ``sweep[i]`` and `member` (i in [-B, B)); a subclass defines ``__len__`` and ``_member(i)``
    for 0 <= i < B."""

    def __iter__(self):
        return (self._member(i) for i in range(len(self)))

    def __getitem__(self, i: int):
        return self.member(i)

    def member(self, i: int):
        """Member i as its own call's result (`FlowSolution` of `solve_flow` for `solve_sweep`,
        `MapTrajectory` of `closed_sgd` for `closed_sgd_sweep`).

        **Raises:** `TypeError` for an i that is not an integer; `IndexError` for i outside [-B, B)."""
        B = len(self)
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"a sweep's member index must be an integer; found {i!r}.")
        if not -B <= i < B:
            raise IndexError(f"member index {i!r} out of range for a sweep of {B} members.")
        return self._member(int(i) % B)


@dataclasses.dataclass(frozen=True, eq=False)
class SweepSolution(Members, Saveable):
    """Result of `solve_sweep`: B members, each the answer of one `solve_flow` call (to tolerance).

    **Attributes:**

    - `ts`: saved times, shape (n,) (shared by all members); `form`: the integrated form.
    - `ys`: the raw batched state (B, n, ...): F (B, n, p, r), log z (B, n, p) or M (B, n, p, p).
    - `data`: the members' data sets (a list of length B; the same object repeated when one data
      set was swept over initial conditions); `init`: initial conditions (B, ...) (M0, W0, or
      the mode strengths z0 (B, p) when `init_is_z`).
    - `stats`: {num_steps, num_accepted_steps, num_rejected_steps: int arrays (B,), max_steps}
      (with ``accuracy=``: also ``global_error`` (B,), the estimated global relative error of
      each member (NaN for a failed one), ``rtol`` and ``accuracy_solves``, see `solve_flow`);
      `results`: diffrax's result message per member; `successful`: bool array (B,).
    - `atol`: the absolute tolerance of each member (B,) (`solve_flow`'s default rule, per
      member, unless given).
    - `eps`: the eps values (B,) when the sweep was given `eps`, else None.
    - `devices`: the devices the batch was sharded over (None: not placed).
    - `mode`: ``"joint"`` (shared steps: `stats`, `results` equal for all members), ``"vmap"``,
      or ``"host"`` (host solvers: each member its own `solve_flow` call; a member that raised
      has ``results[i] = "error: <type>: <message>"`` and NaN states).

    Derived (computed on access, per member as in `FlowSolution`): `M` (B, n, p, p), `z`
    (B, n, p) for commuting data, `W` (B, n, p, r), `loss` (B, n). `sol[i]` (or `member(i)`) is
    member i as a `FlowSolution` (dense output available: it repeats that member's solve alone
    with dense output on first use, as `solve_flow`'s default does; in the joint mode that solve
    takes the member's own steps, so `step_times` and the interpolant are those of its single
    solve, and its `stats` are the shared ones); `len(sol)` is B.
    """

    _unsaved_fields = ("_problem",)  # the members' problem for dense output; a loaded sweep solves again

    def _after_load(self) -> None:
        object.__setattr__(self, "_problem", None)

    ts: np.ndarray
    form: str
    ys: np.ndarray
    data: list
    init: np.ndarray
    init_is_factor: bool
    stats: dict
    results: list
    successful: np.ndarray
    atol: np.ndarray | None = None
    eps: np.ndarray | None = None
    devices: list | None = None
    mode: str = "vmap"
    init_is_z: bool = False
    _y0: np.ndarray = dataclasses.field(repr=False, default=None)
    _mask: np.ndarray | None = dataclasses.field(repr=False, default=None)
    _problem: tuple = dataclasses.field(repr=False, default=None)
    settings: tuple = dataclasses.field(repr=False, default=())

    def __len__(self) -> int:
        return len(self.data)

    def _member(self, i: int) -> FlowSolution:
        """Member i as a `FlowSolution` (the result its `solve_flow` call would give, to tolerance)."""
        return self._members[i]

    @functools.cached_property
    def _members(self) -> list:
        if self._problem is None:  # a loaded sweep: dense output by solving the member alone again
            return [self._loaded_member(i) for i in range(len(self))]
        out = []
        for i in range(len(self)):
            data = self.data[i]
            mask = None if self._mask is None else jnp.asarray(self._mask[i])
            dyn = _member_args(self._problem, data, jnp.asarray(self._y0[i]), mask, _f64(self.atol[i]))
            steps = int(self.stats["num_steps"][i])
            info = np.array(
                [
                    _CODE_OF[self.results[i]],
                    steps,
                    int(self.stats["num_accepted_steps"][i]),
                    int(self.stats["num_rejected_steps"][i]),
                    1,
                ]
            )
            # Joint mode: member i alone may take a few more steps than the shared count; vmap mode:
            # the same steps up to rounding (batched linear algebra can flip an accept/reject).
            need = steps + 8 if self.mode == "vmap" else 2 * steps + 16
            room = 1 << int(need).bit_length()
            redo = functools.partial(_member_dense, self._problem.cfg._replace(max_steps=room, dense=True), dyn)
            out.append(
                FlowSolution(
                    ts=self.ts,
                    form=self.form,
                    ys=self.ys[i],
                    data=data,
                    init=self.init[i],
                    init_is_factor=self.init_is_factor,
                    _info=info,
                    max_steps=int(self.stats["max_steps"]),
                    _y0=self._y0[i],
                    _redo=redo,
                    _mask=mask,
                    init_is_z=self.init_is_z,
                )
            )
        return out

    def _loaded_member(self, i: int) -> FlowSolution:
        """Member i of a loaded sweep (`nqf.load`): its saved arrays, and the settings of the
        sweep (with the member's atol) to rebuild dense output by `solve_flow`."""
        steps = int(self.stats["num_steps"][i])
        info = np.array(
            [
                _CODE_OF.get(self.results[i], _FAILED_CODE),  # host sweeps: "error: ..." for a failed member
                steps,
                int(self.stats["num_accepted_steps"][i]),
                int(self.stats["num_rejected_steps"][i]),
                1,
            ]
        )
        settings = tuple(
            (k, float(self.atol[i]) if k == "atol" and self.atol is not None else v) for k, v in self.settings
        )
        member = FlowSolution(
            ts=self.ts,
            form=self.form,
            ys=self.ys[i],
            data=self.data[i],
            init=self.init[i],
            init_is_factor=self.init_is_factor,
            _info=info,
            max_steps=int(self.stats["max_steps"]),
            _y0=self._y0[i],
            _mask=None if self._mask is None else self._mask[i],
            init_is_z=self.init_is_z,
            settings=settings,
        )
        object.__setattr__(member, "_redo", _dense_by_resolving(member))
        return member

    def to_dataframe(self):
        """A tidy pandas DataFrame: one row per member and saved time, columns ``member``,
        ``eps`` (eps sweeps only), ``successful`` (False for a member that failed: its ``loss``
        and ``excess_loss`` are NaN, or, past max_steps, those of its partial solve), ``t``
        (gradient-flow time), ``loss`` and, for commuting data, ``excess_loss``.

        **Raises:** `ImportError` naming pandas if it is not installed."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("SweepSolution.to_dataframe needs pandas: pip install pandas") from None
        B, n = len(self), len(self.ts)
        cols = {"member": np.repeat(np.arange(B), n)}
        if self.eps is not None:
            cols["eps"] = np.repeat(self.eps, n)
        cols["successful"] = np.repeat(np.asarray(self.successful, dtype=bool), n)
        cols["t"] = np.tile(np.asarray(self.ts), B)
        cols["loss"] = np.asarray(self.loss).reshape(-1)
        excess = self._stack("excess_loss")
        if excess is not None:
            cols["excess_loss"] = excess.reshape(-1)
        return pd.DataFrame(cols)

    def _stack(self, name):
        vals = [getattr(m, name) for m in self._members]
        return None if vals[0] is None else np.stack(vals)

    @functools.cached_property
    def M(self) -> np.ndarray:
        """M(t) per member, shape (B, n, p, p)."""
        return self._stack("M")

    @functools.cached_property
    def W(self) -> np.ndarray:
        """A factor W(t) per member, shape (B, n, p, r) (see `FlowSolution.W`)."""
        return self._stack("W")

    @functools.cached_property
    def z(self) -> np.ndarray | None:
        """Mode strengths z(t) per member for commuting data, shape (B, n, p); else None."""
        return self._stack("z")

    @functools.cached_property
    def loss(self) -> np.ndarray:
        """MSE loss per member at the saved times, shape (B, n)."""
        return self._stack("loss")


# ------------------------------------------------------------------------------------------
# Front end


def _refuse_traced(**args) -> None:
    """`solve_sweep` is a host-side driver: a clear error (naming the argument and the
    transformable alternative) instead of a TracerArrayConversionError under jit / vmap / grad."""
    for name, value in args.items():
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(value)):
            raise TypeError(
                f"`solve_sweep` cannot run inside jax.jit / jax.vmap / jax.grad (found a traced `{name}`): "
                "it validates, batches, shards and reports its members on the host. Inside JAX code, "
                "batch with jax.vmap over nqf.solve_flow, which is transformable end to end (same "
                "solver and tolerances), e.g. jax.vmap(lambda e: nqf.solve_flow(data, "
                "W0=jnp.sqrt(e) * jnp.eye(p), t1=t1, ts=ts).loss)(eps); call solve_sweep itself with "
                "concrete arrays (it compiles the batch once)."
            )


SWEEP_OPTIONS = (
    "ts",
    "rtol",
    "atol",
    "pcoeff",
    "icoeff",
    "dt0",
    "stiff",
    "mode",
    "throw",
    "memory_budget",
    "method",
    "progress",
    "timeout",
    "gather",
    "executor",
    "checkpoint",
    "chunk_size",
)


@with_accuracy
def solve_sweep(
    data,
    *,
    eps=None,
    M0=None,
    W0=None,
    z0=None,
    t1,
    t0: float = 0.0,
    form: str | AbstractForm = "auto",
    solver=None,
    stepsize_controller: PID | None = None,
    saveat: Save | None = None,
    devices=None,
    **options,
) -> SweepSolution | None:
    """Solve a batch of MSE gradient flows (Eq. E9 / E13) in one compiled call.

    Member i is the flow `solve_flow(data_i, M0=M0_i (or W0=W0_i), ...)` with the same solver,
    tolerances and saved times. Its answer equals that call's to the solver tolerance (fig3,
    rtol = 1e-10, 64 members: <= 1.25e-9 relative in the joint mode, whose shared steps make
    each member at least as accurate as its single solve; <= 5.5e-10 in the vmap mode, where
    batched kernels round differently and move the adaptive steps slightly).

    **Arguments:**

    - `data`: one data set (`DenseData`, `CommutingData`, `LowRankData`) shared by all members, or a sequence of
      B data sets of the same type and shapes (seeds, a theta grid), stacked into one batched pytree.
    - Initial conditions, exactly one of: `eps` (scalar or (B,)): M0 = eps * I (small initialization W0 =
      sqrt(eps) I), or with a base `M0` (p, p): M0_i = eps_i * M0; `M0` (p, p) or a batch (B, p, p); `W0` (p, d)
      or a batch (B, p, d); for commuting data (GLV form) `z0` (p,) or a batch (B, p) of mode strengths >= 0,
      alone or with `eps` (B,) (z0_i = eps_i z0). With commuting data and the GLV form, `eps` alone is z0 = eps:
      no p x p matrix is formed (eps sweeps at any p); `init` then holds z0 (B, p) (`init_is_z`). An unbatched
      initial condition is shared by all data sets; a batched one is paired member by member with a sequence of
      data sets (the sizes must agree).
    - `t1`, `t0` (gradient-flow times), `form` (a form object or ``"auto"``, ``"M"``, ``"factor"``, ``"glv"``;
      not ``"M-mu"``), `solver` (a diffrax solver or its name), `stepsize_controller` (`PID`; options ``rtol``,
      ``atol``, ``pcoeff``, ``icoeff``, ``dt0``), `saveat` (`Save(ts)`: the saved times, default 201; option
      ``ts``; only the state, no dense output), `max_steps`, `weight_decay` (options): as in `solve_flow`. The
      default atol is per member, as `solve_flow` would choose it; a given atol is a scalar or one value per
      member (B,). A stiff solver (option ``stiff=True``, "rodas5p" or a Kvaerno name) gets `nqf.stiff`'s
      structured linear solve in the GLV form for `DiagonalData` and one shared `CommutingData`; otherwise
      lineax's dense LU, for which ``mode="auto"`` picks the vmap mode.
    - `devices`: None (default: JAX's default device, batch not placed), ``"all"``, an int n (the first n
      devices) or a list of devices: the batch is sharded over a ``"batch"`` mesh axis (padded to a multiple of
      the device count, the padding stripped). Stiff sweeps shard for `DiagonalData` and for a shared
      `CommutingData` in the joint mode only. Under `jax.distributed` ``"all"`` means the devices of every
      process (module docstring); a list that spans processes must include a device of each process.
    - `**options`: the keyword aliases above and ``mode``: ``"auto"`` (default: ``"joint"`` when all members
      have the same atol, else ``"vmap"``), ``"joint"`` (one ODE on the stacked state, shared steps; `stats` and
      `results` shared) or ``"vmap"`` (lockstep, each member its own steps), see the module docstring; ``throw``
      (default True: raise if any member fails; False: report in `results` / `successful`); ``memory_budget``
      (bytes; B members' states are estimated first, `nqf.memory.MemoryBudgetError`); ``gather``: ``"all"``
      (default) or ``"process0"`` (under `jax.distributed` only process 0 gets the result).
    - Host solvers (``solver="lsoda"`` / ``"cvode"``, ``method="exact"``): the members are `solve_flow` calls
      (`nqf.solvers._executor`), run in order here or through option ``executor`` (any
      `concurrent.futures.Executor`: a spawn-started `ProcessPoolExecutor`, dask.distributed's
      ``Client.get_executor()``), bitwise equal to the loop of those calls, members in tasks of `chunk_size`
      (default 1); a member that raises does not stop the others (``throw=True``: `SweepMemberError` naming each
      failed member and its exception, the others in its `result`; ``throw=False``: marked in `successful` /
      `results`); option ``timeout`` (seconds, the whole sweep, with an executor) bounds the wait
      (`TimeoutError` naming the unfinished members); ``mode="host"``.
    - Option ``accuracy``: the global relative error to reach, as in `solve_flow` (one rtol shared by the
      members, tightened until every successful member's estimate is at most accuracy / 4; not with
      ``checkpoint``); `stats` gains ``global_error`` (B,), ``rtol``, ``accuracy_solves``.
    - Option ``checkpoint``: a directory: run the members in chunks of `chunk_size` (JAX sweeps: default B/16
      rounded up, each chunk one compiled sub-sweep) and save each finished chunk there (`nqf.save` format) with
      a fingerprint of the arguments; a rerun with the same arguments reads the finished chunks and runs the
      others (a killed sweep loses the chunks in flight), a rerun with other arguments is refused (`ValueError`
      naming them). The result is bitwise that of the same call without `checkpoint`; against one call over all
      members (``chunk_size=None``) equal to the solver tolerance (`nqf.solvers._checkpoint`). `chunk_size`
      alone runs in chunks without saving; option ``progress`` (True: a line per chunk on stderr, or a callable
      taking an `nqf.solvers.SweepProgress`) reports each chunk.

    **Returns:** a `SweepSolution` (batched arrays; `sol[i]` is member i as a `FlowSolution`);
    None in processes other than 0 with ``gather="process0"`` under `jax.distributed`.

    Not transformable: a host-side driver of one compiled batch; a traced argument raises
    `TypeError` (inside JAX code use ``jax.vmap`` over `nqf.solve_flow`).

    **Raises:** `TypeError` for a traced argument, a non-data `data` (an `NQFModel` included) or an unknown
    keyword; `ValueError` for data sets of different types, structures or shapes, batch sizes that do not agree,
    eps <= 0 or non-finite, bad shapes, non-symmetric / non-PSD M0, bad tolerances or `ts`, form ``"M-mu"``,
    unavailable devices, a bad ``gather``, or arguments that differ between processes (naming them);
    `TimeoutError` if another process of a `jax.distributed` sweep does not make the same call in time;
    `NotImplementedError` for a stiff sweep sharded where it is not supported; `MaxStepsReached` (naming the
    members) if a member runs out of steps; `FloatingPointError` if a member blows up. With a checkpoint:
    `ValueError` naming the arguments that differ from the checkpoint's. Host solvers:
    `nqf.solvers.SweepMemberError` naming each failed member and its exception (``throw=True``), `TimeoutError`
    naming the unfinished members, `TypeError` for an `executor` without ``submit``, `ValueError` for `executor`
    with a JAX solver or `devices` with a host solver.
    """
    max_steps, weight_decay = options.pop("max_steps", 100_000), options.pop("weight_decay", 0.0)  # keywords
    check_options(options, SWEEP_OPTIONS, "solve_sweep")
    check_flag(options.get("throw", True), "throw")
    args = dict(locals())
    if _chunked(solver, options):
        _refuse_traced(data=data, eps=eps, M0=M0, W0=W0, z0=z0, t1=t1, t0=t0, atol=options.get("atol"))
        return _FRONT_END["solve_sweep"](args)
    form, _ = as_form(form)
    call = _sweep_call(options, solver, stepsize_controller, saveat)
    _refuse_traced(data=data, eps=eps, M0=M0, W0=W0, z0=z0, t1=t1, t0=t0, ts=call.ts, atol=call.atol)
    mode = _check_mode(options.get("mode", "auto"))
    datas, data_batched = _stack_data(data)
    devs = _resolve_devices(devices)
    gather = _check_gather(options.get("gather", "all"))
    if _dist.spans_processes(devs):  # jax.distributed: the same call in every process, or a clear error
        named = {k: v for k, v in args.items() if k != "options"} | dict(form=form, **options)
        _dist.check_same_arguments("solve_sweep", named | {"devices": [d.id for d in devs or ()]})
    if form == "M-mu":
        raise ValueError("`solve_sweep` does not support form='M-mu' (Eq. E10); use `solve_flow` per member.")
    _make_solver(call.solver, call.stiff)  # validates the name before the data work below
    call = call._replace(rtol=check_positive(call.rtol, "rtol"))
    grid = _grid(t0, t1, call, weight_decay, max_steps)
    members = _members(datas, data_batched, (eps, M0, W0, z0), form, grid)
    batch, solver = _batch(members, call, grid)
    sol = _run(batch, solver, mode, devs, grid)
    out = _report(sol, members, batch, call, grid, weight_decay, options.get("throw", True))
    return None if gather == "process0" and jax.process_index() != 0 and _dist.spans_processes(devs) else out


def _check_mode(mode) -> str:
    if mode not in ("auto", "joint", "vmap"):
        raise ValueError(f"`mode` must be 'auto', 'joint' or 'vmap'; found {mode!r}.")
    return mode


def _grid(t0, t1, call, weight_decay, max_steps) -> _Grid:
    """The checked times, weight decay and step budget of a `solve_sweep` call."""
    t0, t1, ts = _time_grid(t0, t1, call.ts)
    gamma = check_positive(weight_decay, "weight_decay", allow_zero=True)
    check_int(max_steps, "max_steps", expected="a positive integer")
    return _Grid(gamma, cast(float, t0), cast(float, t1), cast(np.ndarray, ts), int(max_steps), call.memory_budget)


def _check_gather(gather) -> str:
    if gather not in ("all", "process0"):
        raise ValueError(f"`gather` must be 'all' or 'process0'; found {gather!r}.")
    return gather


def _chunked(solver, options: dict) -> bool:
    """Does the sweep go to the host-solver / chunked front end (`nqf.solvers._executor`)?"""
    host = isinstance(solver, str) and solver.lower() in ("lsoda", "cvode") and options.get("method", "ode") == "ode"
    host = host or options.get("method") == "exact" or getattr(solver, "name", None) in ("exact", "lsoda", "cvode")
    extra = options.get("progress") not in (None, False) or options.get("timeout") is not None
    return host or extra or any(options.get(k) is not None for k in ("executor", "checkpoint", "chunk_size"))


# The front end of host-solver, chunked and checkpointed sweeps, registered by
# `nqf.solvers._executor` (which imports this module; not the reverse).
_FRONT_END: dict = {}


class _Grid(NamedTuple):
    """The checked time grid and budget of a sweep (gradient-flow times)."""

    gamma: float
    t0: float
    t1: float
    ts: np.ndarray
    max_steps: int
    memory_budget: Any


class _Members(NamedTuple):
    """The sweep's members on the host: data sets, stacked data, initial conditions and states."""

    datas: list
    stacked: Any
    data_batched: bool
    form: str
    inits: np.ndarray
    is_factor: bool
    is_z: bool
    y0: np.ndarray
    mask: Any
    eps: Any


def _sweep_call(options: dict, solver, stepsize_controller, saveat):
    """The resolved settings of a sweep (`nqf.solvers._spec.Call`): a diffrax solve saving the
    state at `ts`, PID controlled."""
    call = resolve_call(options, solver=solver, stepsize_controller=stepsize_controller, saveat=saveat, adjoint="auto")
    if call.backend == "exact":
        raise ValueError("`solve_sweep` integrates the ODE; use `solve_flow(solver=Exact())` per member.")
    if call.save != "state" or call.dense is not None:
        raise ValueError(
            "`solve_sweep` saves the state at `ts` (no save='loss', no dense output: "
            "`sol[i]` builds a member's dense output on first use)."
        )
    if call.constant:
        raise NotImplementedError("`solve_sweep` runs under PID step-size control (nqf.PID).")
    return call


def _members(datas, data_batched: bool, inits: tuple, form: str, grid: _Grid) -> _Members:
    """The members' initial conditions and states (checked; B members' memory estimated first)."""
    eps, M0, W0, z0 = inits
    p = datas[0].p
    commuting = isinstance(datas[0], AbstractCommutingData)
    is_z = z0 is not None or (eps is not None and M0 is None and W0 is None and commuting and form in ("auto", "glv"))
    if is_z:  # GLV mode strengths: no p x p matrix at any p
        _check_z_form(M0, W0, commuting, datas[0], form)
        inits, init_batched = _initial_z_batch(p, eps, z0)
        is_factor = False
    else:
        inits, is_factor, init_batched = _initial_batch(p, eps, M0, W0)
    B = len(datas) if data_batched else inits.shape[0]
    if data_batched and init_batched and inits.shape[0] != len(datas):
        raise ValueError(
            f"Batch sizes do not agree: {len(datas)} data sets but {inits.shape[0]} initial "
            "conditions (members are paired one to one; give one shared initial condition or one "
            "per data set)."
        )
    if inits.shape[0] != B:
        inits = np.broadcast_to(inits, (B,) + inits.shape[1:])
    name = "eps" if eps is not None else ("z0" if is_z else "W0" if is_factor else "M0")
    kind = "z" if is_z else "W" if is_factor else "M"
    for data, members in zip(datas, np.split(inits, len(datas))) if data_batched else [(datas[0], inits)]:
        check_initial_loss(data, members, name, kind)
    # B members' states and saved times, estimated before any batched array is built
    early_form = (
        "glv"
        if is_z
        else _initial_state(datas[0], None if is_factor else inits[0], inits[0] if is_factor else None, form)[0]
    )
    _check_solve_memory(
        early_form,
        inits[0],
        datas[0],
        len(grid.ts),
        "state",
        None,
        False,
        False,
        grid.max_steps,
        grid.memory_budget,
        members=B,
    )
    if not data_batched:
        datas = datas * B
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *datas) if data_batched else datas[0]
    if is_z:
        form, mask = "glv", inits > 0
        y0 = np.where(mask, np.log(np.where(mask, inits, 1.0)), 0.0)
    else:
        form, y0, mask = _states(datas, stacked, data_batched, inits, is_factor, form)
    eps = None if eps is None else np.broadcast_to(np.asarray(eps, float).reshape(-1), (B,)).copy()
    return _Members(datas, stacked, data_batched, form, inits, is_factor, is_z, y0, mask, eps)


def _check_z_form(M0, W0, commuting: bool, data, form: str) -> None:
    """The checks of a sweep started from mode strengths (GLV form)."""
    if M0 is not None or W0 is not None:
        raise ValueError("Give exactly one initial condition: `z0` (with or without `eps`), `M0` or `W0`.")
    if not commuting:
        raise ValueError(
            "`z0` (mode strengths) needs commuting data (`CommutingData` or `DiagonalData`); "
            f"found {type(data).__name__}. Give `eps`, `M0` or `W0`."
        )
    if form != "auto":
        check_form(form, data)
    if form not in ("auto", "glv"):
        raise ValueError(f"`z0` is the initial state of the GLV form; found form={form!r}.")


def _batch(m: _Members, call, grid: _Grid):
    """(the compiled sweep's shared problem, the solver): the structured stiff solve where it
    applies, the per-member atol (solve_flow's rule) and the PID coefficients."""
    B = len(m.datas)
    # Implicit solvers named by string get the structured Newton solve of `nqf.stiff` for the
    # GLV form, as in `solve_flow`: diagonal for DiagonalData; Woodbury for a shared CommutingData,
    # with one basis spanning D_mask Lambda^T for every distinct mask of live modes among the
    # members (each member's Jacobian range). Data sets that differ per member have different
    # bases: lineax's dense LU there.
    structured = m.form == "glv" and (isinstance(m.datas[0], DiagonalData) or not m.data_batched)
    solver = _make_solver(
        call.solver,
        call.stiff,
        m.datas[0],
        m.form if structured else None,
        None if m.mask is None else np.unique(m.mask, axis=0),
    )
    if is_stiff(solver):  # and the stiff solver's matrices
        _check_solve_memory(
            m.form,
            m.inits[0],
            m.datas[0],
            len(grid.ts),
            "state",
            solver,
            False,
            False,
            grid.max_steps,
            grid.memory_budget,
            members=B,
        )
    if call.atol is None:  # solve_flow's rule, per member
        scale = np.abs(m.y0).reshape(B, -1).max(axis=1) if m.form != "glv" else np.ones(B)
        atol = call.rtol * np.where(scale > 0, scale, 1.0)
    else:
        a = np.asarray(as_array(call.atol, "atol", finite=False))
        if a.ndim > 1 or (a.ndim == 1 and a.shape[0] != B):
            raise ValueError(f"`atol` must be a scalar or have shape ({B},); found {shape_str(a.shape)}.")
        for v in a.reshape(-1):
            check_positive(v, "atol")
        atol = np.broadcast_to(a, (B,)).astype(float)
    implicit = is_stiff(solver)
    pcoeff = (0.3 if implicit else 0.0) if call.pcoeff is None else call.pcoeff
    icoeff = (0.4 if implicit else 1.0) if call.icoeff is None else call.icoeff
    solver_dyn, solver_static = _partition_solver(solver)
    cfg = _FlowConfig(
        m.form, "state", solver_static, grid.max_steps, False, "state", False, False, _f64(pcoeff), _f64(icoeff)
    )
    params = jnp.stack([_f64(v) for v in (grid.t0, grid.t1, call.rtol, grid.gamma)])
    dyn = _FlowArgs(None, None, params, _f64(grid.ts), None if call.dt0 is None else _f64(call.dt0), solver=solver_dyn)
    return (_Problem(cfg, solver, dyn), m, atol), solver


def _run(batch, solver, mode: str, devs, grid: _Grid) -> dict:
    """Run the compiled sweep (joint or vmap mode, sharded over `devs`); host arrays out."""
    problem, m, atol = batch
    B = len(m.datas)
    implicit = is_stiff(solver)
    uniform = bool(np.all(atol == atol[0]))
    # An implicit solver with lineax's dense LU would factorize the joint state's (B p) x (B p)
    # Jacobian in the joint mode (B^3 the work of B separate p x p LUs): vmap mode there.
    dense_newton = implicit and not is_structured(solver)
    if mode == "auto":
        mode = "joint" if uniform and not dense_newton else "vmap"
    if (
        devs is not None
        and len(devs) > 1
        and implicit
        and (dense_newton or mode == "vmap")
        and not isinstance(m.datas[0], DiagonalData)
    ):
        raise NotImplementedError(
            "Sharding a stiff sweep over several devices is supported for DiagonalData (both modes) "
            "and for one shared CommutingData with the structured (Woodbury) solve in mode='joint'; "
            f"found {type(m.datas[0]).__name__}"
            + (" with lineax's dense LU" if dense_newton else "")
            + f" in mode={mode!r}. Use "
            "devices=None (one device)" + ("" if dense_newton else " or mode='joint'") + "."
        )
    mask = None if m.mask is None else jnp.asarray(m.mask)
    if mode == "joint":  # one scalar atol; unequal per-member atol by rescaling the states
        atol_ref = float(atol.max())
        arrays = (m.stacked, jnp.asarray(m.y0), mask, None if uniform else _f64(atol / atol_ref))
    else:
        arrays = (m.stacked, jnp.asarray(m.y0), mask, _f64(atol))
    arrays, mesh = _place(arrays, m.data_batched, devs, B)
    if mode == "joint":
        ys, info = _solve_joint(problem, arrays[0], m.data_batched, *arrays[1:3], _f64(atol_ref), arrays[3], mesh)
    else:
        ys, info = _solve_batch(problem, arrays[0], m.data_batched, *arrays[1:], mesh)
    # Under jax.distributed the result spans processes: every process gathers all of it.
    ys, info = _dist.to_host((ys, info), _dist.spans_processes(devs))
    if mode == "joint":
        info = np.broadcast_to(info, (B, 5))
    info = info[:B]
    stats = {
        "max_steps": None,
        **{k: info[:, j + 1].astype(np.int64) for j, k in sorted(enumerate(_STAT_NAMES), key=lambda jk: jk[1])},
    }
    return {
        "ys": ys[:B],
        "codes": info[:, 0],
        "stats": stats,
        "mode": mode,
        "implicit": implicit,
        "devices": devs,
    }


def _place(arrays: tuple, data_batched: bool, devs, B: int):
    """(arrays, mesh): the batch on its device, or padded and sharded over a ``"batch"`` mesh."""
    if devs is None:
        return arrays, None
    if len(devs) == 1:
        return jax.device_put(arrays, devs[0]), None
    n = -(-B // len(devs)) * len(devs)
    mesh = Mesh(np.array(devs), ("batch",))
    b_sh, rep_sh = NamedSharding(mesh, PartitionSpec("batch")), NamedSharding(mesh, PartitionSpec())
    # A mesh over the devices of several processes (jax.distributed): each process builds only its
    # own shards from its host copy (`jax.make_array_from_callback`).
    put = _dist.put if _dist.spans_processes(devs) else jax.device_put
    stacked = arrays[0]
    d_in = put(_pad(stacked, n), b_sh) if data_batched else put(stacked, rep_sh)
    return (d_in,) + tuple(put(_pad(x, n), b_sh) for x in arrays[1:]), mesh


def _report(sol: dict, m: _Members, batch, call, grid: _Grid, weight_decay, throw: bool) -> SweepSolution:
    """The `SweepSolution` (raising for failed members unless `throw` is False)."""
    problem, _, atol = batch
    ys, codes = sol["ys"], sol["codes"]
    ok = codes == diffrax.RESULTS.successful._value
    results = [_RESULT_STR[int(c)] for c in codes]
    if throw:
        _raise_failures(codes, ok, ys, results, sol["mode"], sol["implicit"], grid)
    stats = sol["stats"]
    stats["max_steps"] = grid.max_steps
    recorded = call._replace(
        atol=None, pcoeff=float(problem.cfg.pcoeff), icoeff=float(problem.cfg.icoeff), save="state", adjoint="auto"
    )
    return SweepSolution(
        ts=np.asarray(grid.ts),
        form=m.form,
        ys=ys,
        data=m.datas,
        init=np.asarray(m.inits),
        init_is_factor=m.is_factor,
        stats=stats,
        results=results,
        successful=ok,
        atol=np.asarray(atol),
        eps=m.eps,
        devices=sol["devices"],
        mode=sol["mode"],
        init_is_z=m.is_z,
        _y0=np.asarray(m.y0),
        _mask=None if m.mask is None else np.asarray(m.mask),
        _problem=problem,
        settings=_settings(m.form, recorded, grid.t0, grid.t1, grid.max_steps, weight_decay, None),
    )


def _raise_failures(codes, ok, ys, results, mode: str, implicit: bool, grid: _Grid) -> None:
    """`MaxStepsReached`, `RuntimeError` or `FloatingPointError` naming the failed members."""
    B = len(codes)
    hit = np.flatnonzero(codes == diffrax.RESULTS.max_steps_reached._value)
    if hit.size:
        joint = (
            (
                " (mode='joint': the members share their steps, so all of them stop together; "
                "mode='vmap' names the members that need the steps)"
            )
            if mode == "joint"
            else ""
        )
        raise MaxStepsReached(
            f"Members {hit.tolist()} used all max_steps={grid.max_steps} steps before reaching "
            f"t1={grid.t1}{joint}. Increase `max_steps` or loosen `rtol`/`atol`"
            + ("." if implicit else ", or, if the problem is stiff, pass `stiff=True`.")
        )
    if not ok.all():
        bad = np.flatnonzero(~ok).tolist()
        raise RuntimeError(f"The flow solve failed for members {bad}: {results[bad[0]]}")
    nonfinite = ~np.isfinite(ys.reshape(B, -1)).all(axis=1)
    if nonfinite.any():
        raise FloatingPointError(
            f"The flow produced non-finite values for members {np.flatnonzero(nonfinite).tolist()} "
            "(the solution blew up); check the sign of the labels and the scale of the data, "
            "or reduce t1."
        )
