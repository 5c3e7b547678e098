"""Sweeps over the devices of several processes (`jax.distributed`): placement of host arrays on a
mesh that spans processes, gathering of the results, and the cross-process check that every
process called the sweep with the same arguments (issue 26).

Used by `nqf.solve_sweep` and `nqf.closed_sgd_sweep` when their `devices` include devices of
other processes (``devices="all"`` after `nqf.distributed.initialize`). Every process makes the
same call; each one builds the members on the host (the same arrays), puts its own shards on its
own devices (`jax.make_array_from_callback`), runs its part of the one compiled program, and
gets the full result back by `jax.experimental.multihost_utils.process_allgather`.

The argument check: each process hashes every named argument with the checkpoint fingerprint's
encoding (`nqf.solvers._digest._feed`, strict: array bytes, dtypes and shapes; pytree structures;
Python functions by their code, defaults, closure cells and data globals; other values by their
repr with memory addresses removed) and publishes the
digests in the `jax.distributed` coordination service's key-value store; each process then
reads every other process's digests (a bounded wait: `timeout_s`) and compares them with
process 0's. A mismatch raises the same `ValueError`, naming the argument and the processes, in
every process; a process that does not arrive within the timeout (dead, stuck, or running other
code) raises a `TimeoutError` naming it. No collective over the devices is entered before this
check passes, so a mismatch cannot deadlock the compiled sweep.
"""

from __future__ import annotations

import hashlib
import json

import jax
import numpy as np

from ._digest import _feed  # one encoding for this check and the checkpoint fingerprint

__all__: list[str] = []

#: Default bound (seconds) on the wait for the other processes at a sweep's argument check;
#: `nqf.distributed.initialize(timeout=...)` changes it.
DEFAULT_TIMEOUT_S = 300.0
_state = {"timeout_s": DEFAULT_TIMEOUT_S, "calls": {}}


def spans_processes(devs) -> bool:
    """Whether the devices `devs` (a list, or None) include a device of another process."""
    if devs is None or jax.process_count() == 1:
        return False
    me = jax.process_index()
    return any(d.process_index != me for d in devs)


def check_devices_cover_processes(devs) -> None:
    """A device list that spans processes must include a device of every process (each process
    runs its part of one program): `ValueError` naming the processes left out."""
    if not spans_processes(devs):
        return
    have = {d.process_index for d in devs}
    missing = sorted(set(range(jax.process_count())) - have)
    if missing:
        raise ValueError(
            f"`devices` spans several processes but has no device of process(es) {missing}; under "
            "jax.distributed every process runs its part of the sweep, so give devices='all' (every "
            "device of every process) or a list with at least one device of each process."
        )


def put(tree, sharding):
    """Host values (a pytree of arrays) onto a sharding whose mesh may span processes: each
    process builds only its own shards from its (identical) host copy."""

    def one(x):
        a = np.asarray(x)
        return jax.make_array_from_callback(a.shape, sharding, lambda index: a[index])

    return jax.tree.map(one, tree)


def to_host(tree, distributed: bool):
    """Arrays of a compiled sweep as numpy arrays, gathered from every process if `distributed`."""
    if not distributed:
        return jax.tree.map(np.asarray, tree)
    from jax.experimental import multihost_utils

    return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))


def host(x) -> np.ndarray:
    """One array as numpy: `np.asarray`, or gathered from every process when it spans processes
    (e.g. a solve of data sharded by `nqf.solvers.distributed.shard_modes` over all processes)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def digest(value) -> str:
    """A hex digest of `value` that is equal across processes for equal arguments."""
    h = hashlib.sha256()
    _feed(h, value)
    return h.hexdigest()[:32]


def check_same_arguments(func: str, named: dict, timeout_s: float | None = None) -> None:
    """Every process must call `func` with the same arguments: compare the digests of the
    `named` arguments across processes (the coordination service's key-value store, each wait
    bounded by `timeout_s`). Raises the same `ValueError` in every process on a mismatch, naming
    the arguments and processes; `TimeoutError` naming a process that did not arrive."""
    from jax._src import distributed as jd

    client = jd.global_state.client
    if client is None:  # a multi-process runtime that is not jax.distributed: nothing to compare with
        return
    timeout_s = float(_state["timeout_s"] if timeout_s is None else timeout_s)
    n, me = jax.process_count(), jax.process_index()
    count = _state["calls"].get(func, 0)
    _state["calls"][func] = count + 1
    mine = {k: digest(v) for k, v in named.items()}
    key = f"nqf/arguments/{func}/{count}"
    client.key_value_set(f"{key}/{me}", json.dumps(mine))
    every = {}
    for q in range(n):
        if q == me:
            every[q] = mine
            continue
        try:
            every[q] = json.loads(client.blocking_key_value_get(f"{key}/{q}", int(timeout_s * 1000)))
        except Exception as err:  # jaxlib raises its own XlaRuntimeError (DEADLINE_EXCEEDED)
            raise TimeoutError(
                f"`{func}` (call {count} in process {me}): process {q} did not reach the same call "
                f"within {timeout_s:g} s (it died, is stuck, raised an error before the call, or runs "
                f"different code); the sweep was not started. Cause: {str(err).splitlines()[0][:200]}"
            ) from None
    ref = every[0]
    bad = {}
    for q in range(1, n):
        for name in sorted(set(ref) | set(every[q])):
            if ref.get(name) != every[q].get(name):
                bad.setdefault(name, []).append(q)
    if bad:
        listed = "; ".join(f"`{name}` differs between process 0 and process(es) {qs}" for name, qs in bad.items())
        raise ValueError(
            f"`{func}` was called with different arguments in different processes: {listed}. Under "
            "jax.distributed every process must make the same call (same data, initial conditions "
            "and settings); the sweep was not started."
        )
