"""Sweeps of the discrete training maps: `closed_sgd` over a batch of learning rates, momenta,
weight decays, batch-sampling keys (or batch schedules) and initial conditions in ONE compiled
call (Theorem 2's maps E5-E6, Corollary 2 / E7 for momentum).

`closed_sgd_sweep` validates every member on the host exactly as `nqf.closed_sgd` does (same
messages, with the member's index), computes each member's initial factor on the host, and
runs `jax.vmap` of the one traceable core of `closed_sgd` (`nqf.dynamics._maps._simulate`) over the
members: one program, compiled once per shapes, for B members. Member i equals its own
`closed_sgd` call to rounding (<= 1.3e-15 relative on M, measured; tested to 1e-12).

Members are paired element by element (like `nqf.solve_sweep`): each swept argument is a
scalar (shared) or has one entry per member, and all batched arguments must have the same
length B. For a full grid (every lr for every seed) build it with `np.meshgrid` and pass the
raveled arrays.

**Sharding.** ``devices="all"`` (or an int n, or a list of devices) places the member axis on
a one-axis `jax.sharding.Mesh` named ``"batch"`` exactly as `nqf.solve_sweep` does (same device
resolution and padding helpers): the batch is padded to a multiple of the device count with
copies of the last member, each device runs its shard (`jax.shard_map`), and the padding is
stripped. Members do not interact, so the result does not depend on the number of devices
(tested on 2 host CPU devices). Under `jax.distributed` (after `nqf.distributed.initialize()`),
the same call with ``devices="all"`` in every process shards the members over the devices of
all processes and gathers the result in every process (``gather="process0"``: process 0 only),
after checking that every process passed the same arguments (as `nqf.solve_sweep` does; tested
with 2 local processes against one process, <= 1e-13).

**Program choice.** The sweep runs one program for all members: if any member has
momentum > 0, all run the momentum map (with beta = 0 the factor form's momentum map gives
plain SGD's numbers exactly; with ``form="M"`` it is E7's (P, Q) form instead of E5-E6, equal
to rounding for well-conditioned problems). Minibatches: one schedule (steps, b) shared by all
members, or one per member (B, steps, b), drawn from a key per member.

**Measured** (`benchmarks/bench_maps.py`, `LrSweepCompare`; 2 shared CPU cores, float64): a
64-member learning-rate sweep of a two-layer MLP's NQF (rank-2 A, batch 32, width d = 100) in
one call against 64 calls of the compiled `closed_sgd`: 8-13x faster at p = 5 (m = 64, 500
steps), 2.6-2.8x at p = 17 (m = 256, 500 steps), 0.9-1.3x at p = 65 (m = 600, 200 steps). The
sweep saves the per-call work (host checks, dispatch, transfers), not the arithmetic: it pays
for small problems and breaks even once a call's compute dominates. Members agree with their
single calls to <= 1.3e-15 relative on M.
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._core._checks import REQUIRED, as_array, check_flag, keyword_options, shape_str
from ..data._model import as_model
from ..dynamics import _maps as maps
from ..dynamics._batches import _draw, check_batch_indices, check_schedule_memory
from ..dynamics._losses import as_loss, expand_rows
from ..dynamics._maps import FORMS, MapTrajectory
from ..dynamics._train_args import (
    check_count,
    check_lr,
    check_momentum,
    check_nesterov,
    check_saves_memory,
    check_weight_decay,
    first_nonfinite_step,
    loop_counts,
    loss_inputs,
    resolve_batches,
    save_schedule,
)
from ..dynamics._training import accepts_training
from . import _distributed as _dist
from ._sweep import Members, _check_gather, _pad, _resolve_devices

__all__ = ["MapSweep", "closed_sgd_sweep"]

# Set by a chunked sweep (`nqf.solvers._executor.chunked_map_sweep`) whose whole batch has momentum:
# every chunk then runs the momentum map, as the one-call sweep does.
_MOMENTUM_MAP = contextvars.ContextVar("nqf_momentum_map", default=False)
# The chunked / checkpointed front end, registered by `nqf.solvers._executor` (which imports this
# module; not the reverse).
_FRONT_END: dict = {}


@dataclasses.dataclass(frozen=True, eq=False)
class MapSweep(Members, MapTrajectory):
    """Result of `closed_sgd_sweep`: B members, each the trajectory of one `closed_sgd` call.

    A batched `nqf.MapTrajectory` (the fields of a trajectory, each with a leading member axis B,
    as `jax.vmap` of `closed_sgd` would return them), as numpy arrays, plus the swept values. A
    plain frozen dataclass (it pickles). `n` is the number of saved steps.

    **Attributes:**

    - `steps`: saved step numbers (n,) (shared); `t`: gradient-flow times lr_i * steps (B, n).
    - `M` (B, n, p, p); `mu` (B, n, p) or None (plain model without `mu0`); `outputs`
      (B, n, m); `loss` (B, n) (full training set, without the weight-decay penalty); `L`
      (B, n, p, p) for ``form="factor"``; `P` (B, n, p, p), `Q` (B, n, p) for ``form="M"`` with
      momentum; else None. As in `nqf.MapTrajectory`, member by member.
    - `lr`, `momentum`, `weight_decay`: each member's value (B,).
    - `seed`: each member's integer batch-sampling seed (B,) when `key` was given as integers,
      else None.
    - `successful`: (B,) bool, False for a member whose M became non-finite (diverged; only
      with ``throw=False``).
    - `d`: the width (None if it was not needed); `form`; `nesterov`.
    - `devices`: the devices the members were sharded over, as strings (None: not placed).

    `sweep[i]` (or `member(i)`) is member i as a `MapTrajectory`; `len(sweep)` is B;
    `to_dataframe()` gives a tidy pandas table. (Not a JAX pytree: it is built on the host.)
    """

    momentum: np.ndarray
    weight_decay: np.ndarray
    seed: np.ndarray | None
    successful: np.ndarray
    nesterov: bool
    devices: tuple | None = None

    def __len__(self) -> int:
        return self.lr.shape[0]

    def _member(self, i: int) -> MapTrajectory:
        """Member i as a `MapTrajectory` (what its own `closed_sgd` call returns, to rounding)."""
        pick = lambda x: None if x is None else x[i]  # noqa: E731
        return MapTrajectory(
            steps=self.steps,
            t=self.t[i],
            M=self.M[i],
            mu=pick(self.mu),
            outputs=self.outputs[i],
            loss=self.loss[i],
            L=pick(self.L),
            P=pick(self.P),
            Q=pick(self.Q),
            d=self.d,
            lr=float(self.lr[i]),
            form=self.form,
        )

    def to_dataframe(self):
        """A tidy `pandas.DataFrame`, one row per member and saved step (B * n rows).

        Columns: ``member`` (0..B-1), the swept parameters ``lr``, ``momentum``,
        ``weight_decay`` (and ``seed`` when the keys were integer seeds), ``successful`` (False
        for a member that diverged, ``throw=False``: non-finite from its divergence on), ``step``, ``t``
        (= lr * step, gradient-flow time) and ``loss`` (full training set, no penalty).

        **Raises:** `ImportError` if pandas is not installed (``pip install pandas``).
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "`MapSweep.to_dataframe` needs pandas, which is not installed (`pip install "
                "pandas`). The same data are the arrays `sweep.loss` (B, n), `sweep.t` (B, n), "
                "`sweep.steps` (n,) and `sweep.lr` (B,)."
            ) from None
        B, n = self.loss.shape
        per_member = lambda x: np.repeat(np.asarray(x), n)  # noqa: E731
        cols = {
            "member": per_member(np.arange(B)),
            "lr": per_member(self.lr),
            "momentum": per_member(self.momentum),
            "weight_decay": per_member(self.weight_decay),
        }
        if self.seed is not None:
            cols["seed"] = per_member(self.seed)
        cols["successful"] = per_member(np.asarray(self.successful, dtype=bool))
        cols.update(step=np.tile(self.steps, B), t=np.asarray(self.t).reshape(-1), loss=self.loss.reshape(-1))
        return pd.DataFrame(cols)


# ------------------------------------------------------------------------------------------
# Inputs


def _member_values(x, name: str, check) -> tuple[np.ndarray, bool]:
    """A scalar or 1-d hyperparameter as float values (B0,), each checked by `check` (the
    `closed_sgd` check, whose message gets the member index), and whether it is batched."""
    arr = np.asarray(x)
    if arr.ndim > 1:
        raise ValueError(
            f"`{name}` must be a scalar or a 1-d array (one value per member); found shape {shape_str(arr.shape)}."
        )
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty; give a scalar or at least one value.")
    values = []
    for i, v in enumerate(arr.reshape(-1)):
        try:
            values.append(check(v))
        except (TypeError, ValueError) as err:
            if arr.ndim == 0:
                raise
            raise type(err)(f"{str(err).rstrip('.')} at index {i}.") from None
    return np.asarray(values, dtype=np.float64), arr.ndim == 1


def _init_members(x, name: str, ndim: int) -> tuple[list | None, bool]:
    """One initial-condition argument as a list of members (one entry if shared)."""
    if x is None:
        return None, False
    a = as_array(x, name, host=True)
    if a.ndim not in (ndim, ndim + 1):
        raise ValueError(
            f"`{name}` must be one initial condition ({ndim}-d) or a batch of them "
            f"({ndim + 1}-d); found shape {shape_str(a.shape)}."
        )
    if a.ndim == ndim:
        return [a], False
    if a.shape[0] == 0:
        raise ValueError(f"`{name}` is an empty batch.")
    return list(a), True


def _member_error(err: Exception, i: int, batched: bool):
    return type(err)(f"Member {i}: {err}") if batched else err


def _initial_batch(model, W0, M0, mu0, d, B: int):
    """(M0 (B, p, p), mu0 (B, p) or None, d, L0 (B, p, p)) through `closed_sgd`'s own
    validation and factorization (`nqf.dynamics._maps._initial_order_params`), member by member."""
    parts = {"W0": _init_members(W0, "W0", 2), "M0": _init_members(M0, "M0", 2), "mu0": _init_members(mu0, "mu0", 1)}
    batched = any(b for _, b in parts.values())
    take = lambda name, i: None if parts[name][0] is None else parts[name][0][i if parts[name][1] else 0]  # noqa: E731
    out = []
    for i in range(B if batched else 1):
        try:
            out.append(maps._initial_order_params(model, take("M0", i), take("mu0", i), d, take("W0", i)))
        except (TypeError, ValueError) as err:
            raise _member_error(err, i, batched) from None
    M0s, mu0s, ds, L0s = zip(*out)
    stack = lambda xs: np.broadcast_to(np.stack(xs), (B,) + np.shape(xs[0]))  # noqa: E731
    return stack(M0s), None if mu0s[0] is None else stack(mu0s), ds[0], stack(L0s)


def _member_keys(key) -> tuple[object, object, np.ndarray | None, bool]:
    """(key of member 0 or the shared key, typed keys (B,) or None, integer seeds or None,
    batched?) from None, an int seed, a PRNG key, a sequence of int seeds or a key array (B,)."""
    if key is None or (isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_))):
        return key, None, None if key is None else np.asarray([int(key)]), False
    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.ndim == 1 and key.shape[0] > 0:
            return key[0], key, None, True
        return key, None, None, False
    if isinstance(key, jax.Array) and key.dtype == jnp.uint32 and key.ndim == 2 and key.shape[1] == 2:
        keys = jax.random.wrap_key_data(key)  # raw (B, 2) uint32 keys
        return key[0], keys, None, True
    arr = np.asarray(key) if not isinstance(key, jax.Array) else key
    if (
        getattr(arr, "ndim", None) == 1
        and arr.size
        and np.issubdtype(arr.dtype, np.integer)
        and not np.issubdtype(arr.dtype, np.bool_)
        and arr.dtype != np.uint32
    ):
        seeds = np.asarray(arr, dtype=np.int64)
        return int(seeds[0]), jax.vmap(jax.random.key)(jnp.asarray(seeds)), seeds, True
    return key, None, None, False  # a single raw key, or bad input: `resolve_batches` says which


def _schedules(batch_indices, batch_size, key, m: int, steps: int):
    """(schedule (steps, b), (B, steps, b) or None, batched?, seeds or None, number of members
    it fixes or None)."""
    bi = batch_indices
    if bi is not None and not isinstance(bi, jax.core.Tracer) and np.ndim(bi) == 3:
        bi = np.asarray(bi)
        if bi.shape[0] == 0:
            raise ValueError("`batch_indices` is an empty batch.")
        if batch_size is not None or key is not None:
            resolve_batches(bi, batch_size, key, m, steps)  # raises: "Give either ..."
        idx = []
        for i, rows in enumerate(bi):
            try:
                idx.append(check_batch_indices(rows, m, steps))
            except ValueError as err:
                raise _member_error(err, i, True) from None
        return jnp.stack(idx), True, None, bi.shape[0]
    key0, keys, seeds, batched = _member_keys(key)
    idx0 = resolve_batches(batch_indices, batch_size, key0, m, steps)  # validates (and draws)
    if not batched:
        return idx0, False, seeds if idx0 is not None else None, None
    draw = jax.vmap(lambda k: _draw(k, m, int(batch_size), steps))
    return draw(keys), True, seeds, keys.shape[0]


def _batch_size(sizes: dict) -> int:
    """The common number of members of the batched arguments {name: size} (1 if none)."""
    distinct = set(sizes.values())
    if len(distinct) > 1:
        listed = ", ".join(f"`{k}` {v}" for k, v in sizes.items())
        raise ValueError(
            f"The batched arguments must have one entry per member, the same number each; found "
            f"{listed}. Members are paired element by element (for a grid, use np.meshgrid)."
        )
    return distinct.pop() if distinct else 1


# ------------------------------------------------------------------------------------------
# The compiled batch


@eqx.filter_jit
def _run_sweep(
    model,
    loss,
    config,
    params,
    init,
    idx,
    idx_batched: bool,
    n_saves: int,
    save_every,
    remainder,
    has_remainder: bool,
    mesh,
):
    """`nqf.dynamics._maps._simulate` vmapped over the members (params (lr, d, gamma, beta) with d shared,
    init, and idx if batched), optionally sharded over `mesh`'s ``"batch"`` axis."""
    lr, d, gamma, beta = params

    def member(lr, gamma, beta, init, idx_i):
        return maps._simulate(
            model,
            loss,
            config,
            (lr, d, gamma, beta),
            init,
            idx_i if idx_batched else idx,
            n_saves,
            save_every,
            remainder,
            has_remainder,
        )

    args = (lr, gamma, beta, init, idx if idx_batched else None)
    batched = jax.vmap(member, in_axes=(0, 0, 0, 0, 0 if idx_batched else None))
    if mesh is None:
        return batched(*args)
    b, rep = PartitionSpec("batch"), PartitionSpec()
    sharded = jax.shard_map(
        batched, mesh=mesh, in_specs=(b, b, b, b, b if idx_batched else rep), out_specs=b, check_vma=False
    )
    return sharded(*args)


def _place(args, devs, B: int, batched: tuple):
    """Pad the batched entries of `args` to a multiple of the device count and shard them over
    a ``"batch"`` mesh (the rest replicated), as `nqf.solve_sweep` does; (args, mesh)."""
    if devs is None:
        return args, None
    if len(devs) == 1:
        return jax.device_put(args, devs[0]), None
    n = -(-B // len(devs)) * len(devs)
    mesh = Mesh(np.array(devs), ("batch",))
    b_sh, rep_sh = NamedSharding(mesh, PartitionSpec("batch")), NamedSharding(mesh, PartitionSpec())
    put = _dist.put if _dist.spans_processes(devs) else jax.device_put  # jax.distributed: own shards only
    placed = tuple(put(_pad(a, n), b_sh) if is_b else put(a, rep_sh) for a, is_b in zip(args, batched))
    return placed, mesh


# ------------------------------------------------------------------------------------------
# Front end


def _refuse_traced(**named) -> None:
    """`TypeError` naming the first traced argument of `closed_sgd_sweep` (a host-side driver)."""
    for name, value in named.items():
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(value)):
            raise TypeError(
                f"`closed_sgd_sweep` cannot run inside jax.jit / jax.vmap / jax.grad (found a traced "
                f"`{name}`): it validates, batches, shards and reports its members on the host. Inside "
                "JAX code use jax.vmap over nqf.closed_sgd, which is transformable, e.g. "
                "jax.vmap(lambda lr: nqf.closed_sgd(model, W0=W0, lr=lr, steps=steps).loss)(lrs)."
            )


def _successful(saved, Ms, lrs, throw: bool) -> np.ndarray:
    """(B,) bool: the members whose saved M stayed finite; `FloatingPointError` naming the
    diverged members (up to 10) when `throw`."""
    B = Ms.shape[0]
    bad = [(i, first_nonfinite_step(saved, Ms[i])) for i in range(B)]
    bad = [(i, k) for i, k in bad if k is not None]
    if bad and throw:
        listed = ", ".join(f"member {i} by step {k} (lr={lrs[i]:g})" for i, k in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise FloatingPointError(
            f"The closed map diverged (non-finite M) for {len(bad)} of {B} members: {listed}{more}. "
            "Reduce their `lr`, or pass throw=False to keep the others."
        )
    successful = np.ones(B, dtype=bool)
    successful[[i for i, _ in bad]] = False
    return successful


_SWEEP_KEYWORDS = dict(
    lr=REQUIRED,
    steps=REQUIRED,
    momentum=0.0,
    weight_decay=0.0,
    nesterov=False,
    batch_indices=None,
    batch_size=None,
    key=None,
    loss=None,
    gather="all",
)  # the keyword options of `closed_sgd_sweep`, in the order it reads them


def _check_shared(steps, save_every, nesterov, form, throw):
    """(steps, save_every, throw) of `closed_sgd_sweep`, checked with `nesterov` and `form`."""
    steps = check_count(steps, "steps")
    save_every = check_count(save_every, "save_every")
    if not isinstance(nesterov, (bool, np.bool_)):
        raise TypeError(f"`nesterov` must be True or False; found {nesterov!r}.")
    if form not in FORMS:
        raise ValueError(f"`form` must be one of {FORMS}; found {form!r}.")
    return steps, save_every, check_flag(throw, "throw")


def _run_members(model, loss, config, values, inits, schedule, counts, devs):
    """The compiled run of B members: `values` (lrs, d, gammas, betas) and `inits` (M0s, mu0s,
    L0s) per member, `schedule` (idx, idx_batched), `counts` (n_saves, *loop_counts), placed on
    `devs` (`_place`). Returns `_run_sweep`'s output (padded to the devices)."""
    lrs, d, gammas, betas = values
    idx, idx_batched = schedule
    B = lrs.shape[0]
    (lr_a, d_a, gamma_a, beta_a), (M0_a, mu0_a, L0_a) = maps._numeric(False, lrs, d, gammas, betas, *inits)
    mu0_a = np.broadcast_to(mu0_a, (B,) + mu0_a.shape[-1:])
    args = (lr_a, gamma_a, beta_a, (M0_a, mu0_a, L0_a), idx)
    args, mesh = _place(args, devs, B, (True, True, True, True, idx_batched))
    lr_a, gamma_a, beta_a, init, idx = args
    n_saves, every, remainder, has_remainder = counts
    params = (lr_a, d_a, gamma_a, beta_a)
    return _run_sweep(
        model, loss, config, params, init, idx, idx_batched, n_saves, every, remainder, has_remainder, mesh
    )


def _members(kw: dict, model, loss, steps: int, save_every: int):
    """The members of a `closed_sgd_sweep` call `kw` (its arguments): the swept values
    (name -> (values, batched)), the batch schedules (idx, idx_batched, seeds) and the number of
    members B, memory checked first. **Raises:** `ValueError` for batched arguments of
    different lengths or a swept value that is not a scalar or 1-d."""
    swept = {
        name: _member_values(kw[name], name, check)
        for name, check in (("lr", check_lr), ("momentum", check_momentum), ("weight_decay", check_weight_decay))
    }
    sizes = {k: v[0].shape[0] for k, v in swept.items() if v[1]}
    for name, ndim in (("W0", 2), ("M0", 2), ("mu0", 1)):
        if kw[name] is not None and np.ndim(kw[name]) == ndim + 1:
            sizes[name] = np.shape(kw[name])[0]
    keys, rows, batch_size = cast(Any, kw["key"]), cast(Any, kw["batch_indices"]), kw["batch_size"]
    members = max([1, *sizes.values(), np.shape(keys)[0] if np.ndim(keys) == 1 else 1])  # checked below
    if np.ndim(rows) == 3:
        members = max(members, np.shape(rows)[0])
    check_saves_memory("closed_sgd_sweep", steps, save_every, maps.saved_floats(model), members, " or members per call")
    if batch_size is not None and np.ndim(keys) == 1:  # one schedule per member, drawn at once
        check_schedule_memory(loss_inputs(loss, model.m), int(batch_size), steps, members)
    idx, idx_batched, seeds, n_idx = _schedules(rows, batch_size, keys, loss_inputs(loss, model.m), steps)
    idx = expand_rows(idx, loss.k)  # a loss coupling k outputs: batches select inputs (all k rows)
    if n_idx is not None:
        sizes["batch_indices" if rows is not None else "key"] = n_idx
    return swept, idx, idx_batched, seeds, _batch_size(sizes)


@accepts_training(schedules=False)
def closed_sgd_sweep(
    model,
    *,
    W0=None,
    M0=None,
    mu0=None,
    d=None,
    save_every: int = 1,
    form: str = "factor",
    devices=None,
    throw: bool = True,
    checkpoint=None,
    chunk_size: int | None = None,
    progress=None,
    **options,
) -> MapSweep | None:
    """Run `nqf.closed_sgd` for a batch of members in one compiled call (Theorem 2, Corollary 2).

    Member i is ``closed_sgd(model, lr=lr[i], momentum=momentum[i],
    weight_decay=weight_decay[i], W0=W0[i] (or M0[i], mu0[i]), key=key[i] (or
    batch_indices[i]), ...)`` with the shared `steps`, `save_every`, `batch_size`, `nesterov`,
    `loss`, `form` and width d; its trajectory equals that call's to rounding (and so that of
    W-space training, `nqf.train_w`). Step n is gradient-flow time t = lr_i * n.

    **Arguments:**

    - `model`: an `nqf.NQFModel` or a bare data set, shared by all members (for a batch of
      labels, vmap `closed_sgd` itself: see its docstring).
    - Swept values, each a scalar (shared) or a 1-d array with one entry per member: `lr`
      (> 0), `momentum` (in [0, 1), default 0), `weight_decay` (>= 0, default 0).
    - Initial conditions as in `closed_sgd`, each shared or batched: `W0` (p, d) or (B, p, d);
      or `M0` (p, p) or (B, p, p), `mu0` (p,) or (B, p), with the width `d` (an int, shared).
    - Batches: full batch by default; `batch_indices` (steps, b) shared or (B, steps, b) one
      schedule per member; or `batch_size` b with `key`: an int seed or PRNG key (shared
      schedule), or one per member: a 1-d integer array of seeds (B,) or a PRNG key array (B,)
      (member i draws exactly what `closed_sgd(..., key=key[i])` draws).
    - `steps`, `save_every`, `nesterov`, `loss`, `form`: as in `closed_sgd`, shared.
    - The training keywords `lr`, `steps`, `momentum`, `weight_decay`, `nesterov`, batches and
      `loss` are those of an `nqf.SGD`: given one by one, or as the description (second
      positional argument, a constant learning rate). They and `gather` are read from
      ``**options`` (an unknown keyword is a `TypeError`).
    - `devices`: None (default: JAX's default device, nothing placed), ``"all"``, an int n (the
      first n devices) or a list of devices: shard the members over them (module docstring).
    - `throw`: raise if a member diverges (default); with False, diverged members are marked in
      `successful` and keep their non-finite values.
    - `checkpoint`: a directory; run the members in chunks of `chunk_size` (default B/16 rounded
      up) and save each finished chunk there (`nqf.save` format) with a fingerprint of the
      arguments; a rerun with the same arguments reads the finished chunks and runs the others,
      a rerun with other arguments is refused (`ValueError` naming them). The result is bitwise
      that of the same call without `checkpoint` (`nqf.solvers._checkpoint`). `chunk_size` alone
      runs in chunks without saving; `progress` (True: a line per chunk on stderr, or a
      callable taking an `nqf.solvers.SweepProgress`) reports each finished chunk.
    - `gather`: ``"all"`` (default) or ``"process0"``: under `jax.distributed` with devices of
      several processes, only process 0 returns the result (the others return None).

    **Returns:** a `MapSweep` (arrays with a leading member axis B; `sweep[i]` is member i as a
    `MapTrajectory`; `sweep.to_dataframe()` a tidy table).

    Not transformable (a host-side driver): with a traced argument inside `jax.jit` /
    `jax.vmap` / `jax.grad` it raises a `TypeError` naming the argument; use ``jax.vmap`` over
    `nqf.closed_sgd` there.

    **Raises:** `TypeError` for a traced argument or an unknown keyword; everything `closed_sgd`
    raises for a member's arguments (`ValueError` / `TypeError`, the message naming the member index
    for batched arguments); `ValueError` if the batched arguments have different numbers of members,
    or a swept value is not a scalar or 1-d, or for unavailable `devices`, a bad `gather`, or
    arguments that differ between the processes of a `jax.distributed` sweep (naming them);
    `TimeoutError` if another process does not make the same call in time; `FloatingPointError`
    naming the members that diverged (with ``throw=True``).
    """
    lr, steps, momentum, weight_decay, nesterov, batch_indices, batch_size, key, loss, gather = keyword_options(
        "closed_sgd_sweep", options, **_SWEEP_KEYWORDS
    )
    kw = {k: v for k, v in locals().items() if k not in ("options", "checkpoint", "chunk_size", "progress")}
    if checkpoint is not None or chunk_size is not None or progress not in (None, False):
        return _FRONT_END["closed_sgd_sweep"](kw, checkpoint=checkpoint, chunk_size=chunk_size, progress=progress)
    _refuse_traced(model=model, lr=lr, W0=W0, M0=M0, mu0=mu0, momentum=momentum, weight_decay=weight_decay, key=key)
    model = as_model(model)
    steps, save_every, throw = _check_shared(steps, save_every, nesterov, form, throw)
    loss = as_loss(loss)
    swept, idx, idx_batched, seeds, B = _members(kw, model, loss, steps, save_every)
    devs = _resolve_devices(devices)
    gather = _check_gather(gather)
    distributed = _dist.spans_processes(devs)
    if distributed:  # jax.distributed: the same call in every process, or a clear error
        named = kw | dict(model=model, steps=steps, loss=loss, save_every=save_every, throw=throw, gather=gather)
        _dist.check_same_arguments("closed_sgd_sweep", named | {"devices": [x.id for x in devs or ()]})
    M0s, mu0s, d, L0s = _initial_batch(model, W0, M0, mu0, d, B)
    lrs, betas, gammas = (np.broadcast_to(swept[k][0], (B,)) for k in ("lr", "momentum", "weight_decay"))
    check_nesterov(nesterov, betas, " for every member")
    saved, n_saves, remainder = save_schedule(steps, save_every)

    config = (form, bool(betas.max() > 0.0) or _MOMENTUM_MAP.get(), bool(nesterov))
    counts = (n_saves, *loop_counts(save_every, remainder))
    out = _run_members(model, loss, config, (lrs, d, gammas, betas), (M0s, mu0s, L0s), (idx, idx_batched), counts, devs)
    out = _dist.to_host(out, distributed)  # under jax.distributed: gathered from every process
    Ms, mus, outputs, losses, extras = jax.tree.map(lambda x: x[:B], out)
    successful = _successful(saved, Ms, lrs, throw)
    if gather == "process0" and distributed and jax.process_index() != 0:
        return None
    return MapSweep(
        steps=saved,
        t=lrs[:, None] * saved[None, :],
        M=Ms,
        mu=None if mu0s is None else mus,
        outputs=outputs,
        loss=losses,
        L=extras.get("L"),
        P=extras.get("P"),
        Q=extras.get("Q"),
        lr=np.array(lrs),
        momentum=np.array(betas),
        weight_decay=np.array(gammas),
        seed=None if seeds is None else np.broadcast_to(seeds, (B,)).copy(),
        successful=successful,
        d=d,
        form=form,
        nesterov=bool(nesterov),
        devices=None if devs is None else tuple(str(x) for x in devs),
    )
