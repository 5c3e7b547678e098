"""Host-solver sweeps through a `concurrent.futures.Executor`: ``solve_sweep(..., solver="lsoda" |
"cvode" or method="exact", executor=pool)``, and the chunked (checkpointed) JAX sweeps' front end.

The host backends (scipy's LSODA, SUNDIALS CVODE on the reduced GLV flow; Theorem 6's closed form,
``method="exact"``) solve one member at a time in numpy, so a sweep of them is a loop of
`solve_flow` calls, member i being ``solve_flow(data_i, z0=..., t1=..., solver=..., ...)`` with
its own initial condition (the rules of `solve_sweep`: ``eps`` alone with commuting data is
z0 = eps, else M0 = eps * I or eps * M0) and its own atol if one per member was given.
With ``executor=None`` that loop runs here, in order. With an executor (`ProcessPoolExecutor`;
dask.distributed's ``Client.get_executor()``; anything with ``submit`` returning
`concurrent.futures.Future`) the members go out in tasks of `chunk_size` members (default 1) and
come back as they finish: the result is the same loop's, bit for bit (each member is the same
`solve_flow` call in another process), in member order.

**Failures.** A member that raises does not stop the others: its exception is caught in the
worker (or, if the task itself fails, e.g. a worker process died, every member of that task
gets a RuntimeError naming the task's exception as its cause). The finished sweep marks the
failed members (``successful[i] = False``, ``results[i] = "error: <type>: <message>"``, NaN states) and, with ``throw=True`` (default),
raises a `SweepMemberError` naming each failed member and its exception (`errors`: {i:
exception}; `result`: the sweep with the other members); ``throw=False`` returns that sweep. If
every member raises the same exception type itself (no failed task), that is a shared bad
argument: the first member's exception is raised instead. ``timeout`` (seconds, for the whole sweep; without an
executor a `ValueError`, as in the JAX path) bounds the wait: on expiry the unfinished tasks are cancelled and a `TimeoutError` names
the members that did not finish (finished ones are in the checkpoint, if any).

**Progress.** ``progress=True`` prints one line per finished task on stderr; a callable gets an
`nqf.solvers.SweepProgress` (done, total, members, errors, from_checkpoint) after each.

**Checkpoint.** With ``checkpoint=PATH`` each task whose members all succeeded is saved as it
finishes (`nqf.solvers._checkpoint`); failed members are not saved, so a rerun retries them.

A `ProcessPoolExecutor` should start its workers with ``mp_context=multiprocessing.get_context(
"spawn")`` (or "forkserver"): JAX is multithreaded and `os.fork` of a process that imported it
can deadlock. Workers import nqf (and JAX) once, 2-3 s each; the members, their data and results
travel pickled. Measured (`benchmarks/bench_executor.py`, 2 shared CPU cores): see
docs/guides/many-machines.md.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import pickle
import time
import traceback
from typing import Any

import diffrax
import numpy as np

from .._core._checks import check_flag, check_int, check_positive
from ..data._operators import AbstractCommutingData
from ._checkpoint import (
    SweepProgress,
    SweepSlicer,
    check_chunk_size,
    check_progress,
    chunks,
    concat_maps,
    concat_sweeps,
    open_checkpoint,
    report,
    run_chunks,
)
from ._map_sweep import _FRONT_END as _MAP_FRONT_END
from ._map_sweep import closed_sgd_sweep
from ._sweep import _FRONT_END as _SWEEP_FRONT_END
from ._sweep import _check_eps, _check_gather, solve_sweep

__all__ = ["SweepMemberError"]

_SUCCESS = str(diffrax.RESULTS.successful)
HOST_OPTIONS = ("ts", "rtol", "atol", "method", "throw", "memory_budget", "progress", "timeout")


class SweepMemberError(RuntimeError):
    """Members of a host-solver sweep raised (`solve_sweep` with an executor or a host solver).

    - `errors`: {member index: the exception it raised} (sorted by index).
    - `result`: the `SweepSolution` with every member, the failed ones marked
      (``successful[i] = False``, NaN states); what ``throw=False`` would have returned.
    """

    def __init__(self, errors: dict, result):
        self.errors, self.result = dict(sorted(errors.items())), result
        B = len(result)
        listed = "; ".join(f"member {i}: {type(e).__name__}: {e}" for i, e in list(self.errors.items())[:10])
        more = f"; and {len(errors) - 10} more" if len(errors) > 10 else ""
        super().__init__(
            f"{len(errors)} of {B} members failed: {listed}{more}. The other members finished: they are "
            "in this error's `result` (a SweepSolution; `errors` maps member index to exception), or pass "
            "throw=False to get it as the return value."
        )


# ------------------------------------------------------------------------------------------
# Members as solve_flow calls


def member_calls(kw: dict, options: dict, slicer: SweepSlicer) -> list[dict]:
    """The keyword arguments of each member's `solve_flow` call (solve_sweep's pairing rules)."""
    data, eps, M0, W0, z0 = (kw[k] for k in ("data", "eps", "M0", "W0", "z0"))
    B = slicer.B
    datas = list(data) if slicer.data_batched else [data] * B
    d0 = datas[0]
    shared = {k: kw[k] for k in ("t1", "t0", "form", "solver", "stepsize_controller", "saveat", "max_steps")}
    shared["weight_decay"] = kw["weight_decay"]
    shared.update({k: v for k, v in options.items() if k in ("ts", "rtol", "method", "memory_budget")})
    atol = options.get("atol")
    commuting = isinstance(d0, AbstractCommutingData)
    form = kw["form"]
    is_z = z0 is not None or (eps is not None and M0 is None and W0 is None and commuting and form in ("auto", "glv"))
    if eps is None and sum(x is not None for x in (M0, W0, z0)) != 1:
        raise ValueError(
            "Give exactly one initial condition: `eps` (M0 = eps * I), `M0` ((p, p) or a batch "
            "(B, p, p)), `W0` ((p, d) or a batch (B, p, d)) or, for commuting data, `z0` ((p,) or "
            "a batch (B, p))."
        )
    e = None if eps is None else np.broadcast_to(np.asarray(eps, dtype=float).reshape(-1), (B,))
    pick = lambda x, batched, i: None if x is None else (np.asarray(x)[i] if batched else x)  # noqa: E731
    calls = []
    for i in range(B):
        c = dict(shared, data=datas[i])
        if atol is not None:
            c["atol"] = pick(atol, slicer.batched["atol"], i)
        if is_z:
            z = np.ones(d0.p) if z0 is None else np.asarray(pick(z0, slicer.batched["z0"], i), dtype=float)
            c["z0"] = z if e is None else e[i] * z
        elif e is not None:
            if W0 is not None:
                raise ValueError("Give `eps` alone (M0 = eps * I) or with a base `M0` (M0 = eps * M0), not with `W0`.")
            base = np.eye(d0.p) if M0 is None else np.asarray(M0, dtype=float)
            c["M0"] = e[i] * base
        elif M0 is not None:
            c["M0"] = pick(M0, slicer.batched["M0"], i)
        else:
            c["W0"] = pick(W0, slicer.batched["W0"], i)
        calls.append(c)
    return calls


def _picklable(err: BaseException, i: int) -> BaseException:
    """The member's exception, with a note naming it and the worker's traceback; a stand-in
    RuntimeError if it does not pickle."""
    tb = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    try:
        err.add_note(f"[nqf sweep] raised by member {i} in process {os.getpid()}:\n{tb}")
        pickle.dumps(err)
        return err
    except Exception:
        return RuntimeError(f"member {i} raised {type(err).__name__}: {err}\n{tb}")


def _record(sol) -> dict:
    info = np.asarray(sol._info)
    return {
        "ts": np.asarray(sol.ts),
        "form": sol.form,
        "ys": np.asarray(sol.ys),
        "init": np.asarray(sol.init),
        "init_is_factor": bool(sol.init_is_factor),
        "init_is_z": bool(sol.init_is_z),
        "info": info,
        "y0": np.asarray(sol._y0),
        "mask": None if sol._mask is None else np.asarray(sol._mask),
        "settings": sol.settings,
    }


def solve_members(calls: list, first: int) -> list:
    """Run members' `solve_flow` calls (members first, first + 1, ...) in this process: a record
    per member, or its exception (the task never raises for a member). The executor task."""
    from ._solve import solve_flow

    out = []
    for j, c in enumerate(calls):
        try:
            out.append(_record(solve_flow(**c)))
        except Exception as err:  # noqa: BLE001 - reported per member, the others go on
            out.append(_picklable(err, first + j))
    return out


# ------------------------------------------------------------------------------------------
# The sweep


def _from_part(part) -> list:
    """A checkpointed chunk (a `SweepSolution`) back into member records."""
    out = []
    for i in range(len(part.ys)):
        info = np.array(
            [0, part.stats["num_steps"][i], part.stats["num_accepted_steps"][i], part.stats["num_rejected_steps"][i], 1]
        )
        out.append(
            {
                "ts": np.asarray(part.ts),
                "form": part.form,
                "ys": part.ys[i],
                "init": part.init[i],
                "init_is_factor": part.init_is_factor,
                "init_is_z": part.init_is_z,
                "info": info,
                "y0": part._y0[i],
                "mask": None if part._mask is None else part._mask[i],
                "settings": part.settings,
            }
        )
    return out


def _assemble(records: list, calls: list, kw: dict, atol_given, eps, datas, errors: dict):
    """The `SweepSolution` of host members (failed members: NaN states, ``successful`` False)."""
    from ._sweep import SweepSolution

    ok = [r for r in records if isinstance(r, dict)]
    r0 = ok[0]
    B = len(records)
    nan_like = lambda x: np.full(np.shape(x), np.nan)  # noqa: E731
    full = []
    for i, r in enumerate(records):
        if isinstance(r, dict):
            full.append(r)
            continue
        c = calls[i]
        init = c.get("z0", c.get("M0", c.get("W0")))
        full.append(
            dict(
                r0,
                ys=nan_like(r0["ys"]),
                init=np.asarray(init, dtype=float) if np.shape(init) == np.shape(r0["init"]) else nan_like(r0["init"]),
                info=np.zeros(5, dtype=np.int64),
                y0=nan_like(r0["y0"]),
                # every mode live: the NaN state gives NaN z, M, W and loss (a mask of zeros made
                # them the values of M = 0, finite; issue 36 B1)
                mask=None if r0["mask"] is None else np.ones(np.shape(r0["mask"]), bool),
            )
        )
    info = np.stack([r["info"] for r in full]).astype(np.int64)
    successful = np.array([isinstance(r, dict) for r in records])
    results = [
        _SUCCESS if isinstance(r, dict) else f"error: {type(errors[i]).__name__}: {errors[i]}"
        for i, r in enumerate(records)
    ]
    return SweepSolution(
        ts=r0["ts"],
        form=r0["form"],
        ys=np.stack([r["ys"] for r in full]),
        data=datas,
        init=np.stack([r["init"] for r in full]),
        init_is_factor=r0["init_is_factor"],
        stats={
            "num_steps": info[:, 1],
            "num_accepted_steps": info[:, 2],
            "num_rejected_steps": info[:, 3],
            "max_steps": int(kw["max_steps"]),
        },
        results=results,
        successful=successful,
        atol=None if atol_given is None else np.broadcast_to(np.asarray(atol_given, dtype=float), (B,)).copy(),
        eps=None if eps is None else np.broadcast_to(np.asarray(eps, dtype=float).reshape(-1), (B,)).copy(),
        devices=None,
        mode="host",
        init_is_z=r0["init_is_z"],
        _y0=np.stack([r["y0"] for r in full]),
        _mask=None if r0["mask"] is None else np.stack([r["mask"] for r in full]),
        settings=r0["settings"],
    )


def _check_executor(executor) -> None:
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TypeError(
            "`executor` must be a concurrent.futures.Executor (ProcessPoolExecutor, dask.distributed's "
            f"Client.get_executor(), ...) or None; found {type(executor).__name__}."
        )
    # the standard library's pools record their shutdown (ThreadPoolExecutor._shutdown,
    # ProcessPoolExecutor._shutdown_thread): one clear error now instead of one failed task per member
    if executor is not None and (
        getattr(executor, "_shutdown", False) is True or getattr(executor, "_shutdown_thread", False) is True
    ):
        raise _shut_down(executor)


def _shut_down(executor, err: Exception | None = None) -> RuntimeError:
    why = f" ({type(err).__name__}: {err})" if err is not None else ""
    return RuntimeError(
        f"`executor` ({type(executor).__name__}) is shut down and takes no new tasks{why}; pass a running "
        "executor (e.g. call solve_sweep inside its `with` block), or executor=None to run the members here."
    )


def _check_timeout(timeout):
    if timeout is None:
        return None
    return check_positive(timeout, "timeout")  # seconds: TypeError for a non-number, ValueError for <= 0


def host_sweep(kw: dict, options: dict, *, executor, checkpoint, chunk_size, fingerprint_args: dict):
    """`solve_sweep` with a host backend: members as `solve_flow` calls, through `executor`."""
    from ._sweep import _stack_data

    unknown = sorted(set(options) - set(HOST_OPTIONS))
    if unknown:
        raise ValueError(
            f"`solve_sweep` with a host solver (lsoda, cvode, method='exact') does not take {unknown}; "
            f"its options are {[*HOST_OPTIONS, 'executor', 'chunk_size', 'checkpoint']}."
        )
    if kw["devices"] is not None:
        raise ValueError(
            "`devices` places a JAX sweep on devices; a host-solver sweep (lsoda, cvode, method='exact') "
            "runs in numpy: give `executor` (e.g. a ProcessPoolExecutor) to run members in parallel."
        )
    _check_executor(executor)
    progress = options.pop("progress", None)
    check_progress(progress)
    timeout = _check_timeout(options.pop("timeout", None))
    if timeout is not None and executor is None:  # as the JAX path: a timeout is an executor's
        raise ValueError(
            "`timeout` needs an `executor`: it bounds the wait for the executor's tasks; a sweep without "
            "one runs its members here, in order, and is not interrupted (pass executor=... or drop timeout)."
        )
    throw = check_flag(options.pop("throw", True), "throw")
    check_int(kw["max_steps"], "max_steps", expected="a positive integer")  # before any member runs
    datas, _ = _stack_data(kw["data"])
    if kw["eps"] is not None:
        _check_eps(kw["eps"])  # the JAX path's errors (empty, not 1-d, not finite and > 0)
    slicer = SweepSlicer(kw["data"], kw["eps"], kw["M0"], kw["W0"], kw["z0"], options.get("atol"))
    B = slicer.B
    for name in ("z0", "M0", "W0", "atol"):
        if slicer.batched[name] and np.shape(slicer.values[name])[0] == 0:
            raise ValueError(f"`{name}` is an empty batch; give at least one member.")
    calls = member_calls(kw, options, slicer)
    if not slicer.data_batched:
        datas = datas * B
    K = check_chunk_size(1 if chunk_size is None else chunk_size, B)
    spans = chunks(B, K)
    ckpt = open_checkpoint(checkpoint, "solve_sweep", fingerprint_args, B, K)
    records: list[Any] = [None] * B
    errors: dict = {}
    failed_tasks: list = []  # tasks that failed as a whole (worker died, submit refused)
    done = 0

    def finish(i0: int, i1: int, out: list, fresh: bool, task_failed: bool = False) -> None:
        nonlocal done
        if task_failed:
            failed_tasks.append((i0, i1))
        bad = {}
        for j, r in enumerate(out):
            records[i0 + j] = r
            if not isinstance(r, dict):
                bad[i0 + j] = r
        errors.update(bad)
        if fresh and ckpt is not None and not bad:
            ckpt.save(
                i0,
                i1,
                _assemble(
                    out,
                    calls[i0:i1],
                    kw,
                    _slice(options.get("atol"), slicer, i0, i1),
                    _slice(kw["eps"], slicer, i0, i1, "eps"),
                    [],
                    {},
                ),
            )
        done += i1 - i0
        report(progress, SweepProgress(done, B, range(i0, i1), bad, not fresh))

    todo = []
    for i0, i1 in spans:
        part = None if ckpt is None else ckpt.load(i0, i1)
        if part is not None:
            finish(i0, i1, _from_part(part), False)
        else:
            todo.append((i0, i1))
    if executor is None:
        for i0, i1 in todo:
            finish(i0, i1, solve_members(calls[i0:i1], i0), True)
    else:
        _run_executor(executor, todo, calls, timeout, finish)
    if not errors:
        return _assemble(records, calls, kw, options.get("atol"), kw["eps"], datas, {})
    if len(errors) == B and not failed_tasks:  # every member raised the same way: a shared bad argument
        first = errors[0]
        if all(type(e) is type(first) for e in errors.values()):
            raise first
    sol = _assemble(records, calls, kw, options.get("atol"), kw["eps"], datas, errors) if len(errors) < B else None
    if sol is None:
        raise SweepMemberError(errors, _NoResult(B)) from errors[min(errors)]
    if throw:
        raise SweepMemberError(errors, sol) from errors[min(errors)]
    return sol


class _NoResult:
    """Stand-in `result` of a `SweepMemberError` where every member failed (nothing to return)."""

    def __init__(self, B: int):
        self.B = B

    def __len__(self) -> int:
        return self.B


def _slice(x, slicer: SweepSlicer, i0: int, i1: int, name: str = "atol"):
    if x is None:
        return None
    return np.asarray(x)[i0:i1] if slicer.batched[name] else np.broadcast_to(np.asarray(x, dtype=float), (i1 - i0,))


def _task_error(err: BaseException, i0: int, i1: int, i: int) -> BaseException:
    """Member i's error when its whole task [i0, i1) failed (not the member's own exception)."""
    out = RuntimeError(f"its task (members {i0}..{i1 - 1}) failed in the executor: {type(err).__name__}: {err}")
    out.__cause__ = err
    return out


def _run_executor(executor, todo: list, calls: list, timeout, finish) -> None:
    """Submit each task, collect them as they finish (up to `timeout` seconds in all)."""
    futures = {}
    for i0, i1 in todo:
        try:
            futures[executor.submit(solve_members, calls[i0:i1], i0)] = (i0, i1)
        except RuntimeError as err:
            if not futures and "shutdown" in str(err):  # shut down before the first task: say so once
                raise _shut_down(executor, err) from err
            finish(i0, i1, [_task_error(err, i0, i1, i) for i in range(i0, i1)], True, True)
        except Exception as err:  # e.g. a broken executor: the task's members fail
            finish(i0, i1, [_task_error(err, i0, i1, i) for i in range(i0, i1)], True, True)
    start = time.monotonic()
    pending = set(futures)
    try:
        for fut in cf.as_completed(futures, timeout=timeout):
            pending.discard(fut)
            i0, i1 = futures[fut]
            try:
                out = fut.result()
            except Exception as err:  # the task itself failed (worker died, pickling): all its members
                finish(i0, i1, [_task_error(err, i0, i1, i) for i in range(i0, i1)], True, True)
                continue
            finish(i0, i1, out, True)
    except cf.TimeoutError:
        for fut in pending:
            fut.cancel()
        left = sorted(i for fut in pending for i in range(*futures[fut]))
        raise TimeoutError(
            f"`solve_sweep` timed out after {time.monotonic() - start:.1f} s (timeout={timeout} s): members "
            f"{left[:20]}{' ...' if len(left) > 20 else ''} ({len(left)} of {len(calls)}) did not finish; their "
            "tasks were cancelled (a task already running goes on in its worker until it ends). Finished "
            "members are kept in the checkpoint, if one was given: rerun with the same arguments to resume."
        ) from None


# ------------------------------------------------------------------------------------------
# Chunked (checkpointed) JAX sweeps


def chunked_sweep(solve_sweep, kw: dict, options: dict, *, checkpoint, chunk_size, fingerprint_args: dict):
    """`solve_sweep` over chunks of members (each one compiled sub-sweep), checkpointed."""
    from ._solution import _CODE_OF
    from ._sweep import _Grid, _raise_failures, _resolve_devices

    progress = options.pop("progress", None)
    check_progress(progress)
    if options.pop("timeout", None) is not None:
        raise ValueError("`timeout` applies to host-solver sweeps run through an `executor`.")
    throw = check_flag(options.pop("throw", True), "throw")
    gather = _check_gather(options.pop("gather", "all"))  # every chunk gathers to all processes
    atol = options.get("atol")
    pid = kw["stepsize_controller"]
    if atol is None and pid is not None:
        atol = getattr(pid, "atol", None)
    slicer = SweepSlicer(kw["data"], kw["eps"], kw["M0"], kw["W0"], kw["z0"], atol)
    B = slicer.B
    mode, implicit = _whole_batch_mode(solve_sweep, kw, options)
    K = check_chunk_size(_default_chunk(B, checkpoint) if chunk_size is None else chunk_size, B)
    ckpt = open_checkpoint(checkpoint, "solve_sweep", {**fingerprint_args, "mode (resolved)": mode}, B, K)
    devs = _resolve_devices(kw["devices"])

    def compute(i0: int, i1: int):
        part = slicer.take(i0, i1)
        sub = dict(kw, data=part["data"], eps=part["eps"], M0=part["M0"], W0=part["W0"], z0=part["z0"])
        opts = dict(options, mode=mode, throw=False)
        if slicer.batched["atol"]:
            if "atol" in options:
                opts["atol"] = part["atol"]
            else:
                import equinox as eqx

                sub["stepsize_controller"] = eqx.tree_at(lambda c: c.atol, pid, part["atol"])
        sol = solve_sweep(**sub, **opts)
        return _strip(sol)

    parts = run_chunks(chunks(B, K), ckpt, compute, progress, B)
    datas = list(kw["data"]) if slicer.data_batched else [kw["data"]] * B
    sol = concat_sweeps(parts, datas, devs)
    if throw:
        codes = np.array([_CODE_OF[r] for r in sol.results])
        ok = np.asarray(sol.successful)
        _raise_failures(
            codes,
            ok,
            sol.ys,
            sol.results,
            sol.mode,
            implicit,
            _Grid(0.0, 0.0, float(kw["t1"]), np.zeros(0), int(kw["max_steps"]), None),
        )
    return _gathered(sol, gather, devs)


def _gathered(sol, gather: str, devs):
    """The result, or None outside process 0 with ``gather="process0"`` under jax.distributed."""
    import jax

    from ._distributed import spans_processes

    return None if gather == "process0" and jax.process_index() != 0 and spans_processes(devs) else sol


def _default_chunk(B: int, checkpoint) -> int:
    """Members per chunk when `chunk_size` is not given: B/16 rounded up with a checkpoint (at most
    1/16 of the work lost to a kill), else B (``progress`` alone does not split the sweep)."""
    return -(-B // 16) if checkpoint is not None else B


def _strip(sol):
    """A chunk's `SweepSolution` as saved: no data sets (the caller's are attached on assembly),
    no devices, no compiled problem."""
    import dataclasses

    return dataclasses.replace(sol, data=[], devices=None, _problem=None)


def _whole_batch_mode(solve_sweep, kw: dict, options: dict) -> tuple[str, bool]:
    """The mode ``mode="auto"`` picks for the whole batch (as `solve_sweep`'s `_run` does), and
    whether the solver is implicit; validates every member's arguments up front."""
    from .._core._checks import check_positive
    from ._forms import as_form
    from ._initial import _time_grid
    from ._sweep import _batch, _Grid, _members, _stack_data, _sweep_call
    from .stiff import is_stiff, is_structured

    call = _sweep_call(dict(options), kw["solver"], kw["stepsize_controller"], kw["saveat"])
    form, _ = as_form(kw["form"])
    datas, data_batched = _stack_data(kw["data"])
    call = call._replace(rtol=check_positive(call.rtol, "rtol"))
    t0, t1, ts = _time_grid(kw["t0"], kw["t1"], call.ts)
    gamma = check_positive(kw["weight_decay"], "weight_decay", allow_zero=True)
    max_steps = kw["max_steps"]
    check_int(max_steps, "max_steps", expected="a positive integer")
    grid = _Grid(gamma, float(t0), float(t1), np.asarray(ts), int(max_steps), call.memory_budget)
    members = _members(datas, data_batched, (kw["eps"], kw["M0"], kw["W0"], kw["z0"]), form, grid)
    (_, _, atol), solver = _batch(members, call, grid)
    implicit = is_stiff(solver)
    mode = options.get("mode", "auto")
    if mode == "auto":
        uniform = bool(np.all(atol == atol[0]))
        mode = "joint" if uniform and not (implicit and not is_structured(solver)) else "vmap"
    return mode, implicit


def chunked_map_sweep(kw: dict, *, checkpoint, chunk_size, progress):
    """`closed_sgd_sweep` over chunks of members, checkpointed (`nqf.solvers._checkpoint`)."""
    from ._map_sweep import _MOMENTUM_MAP, _member_keys, _resolve_devices

    check_progress(progress)
    kw = dict(kw)
    gather = _check_gather(kw.pop("gather", "all"))  # every chunk gathers to all processes
    throw = check_flag(kw["throw"], "throw")
    batched = {
        "lr": np.ndim(kw["lr"]) == 1,
        "momentum": np.ndim(kw["momentum"]) == 1,
        "weight_decay": np.ndim(kw["weight_decay"]) == 1,
        "W0": kw["W0"] is not None and np.ndim(kw["W0"]) == 3,
        "M0": kw["M0"] is not None and np.ndim(kw["M0"]) == 3,
        "mu0": kw["mu0"] is not None and np.ndim(kw["mu0"]) == 2,
        "batch_indices": kw["batch_indices"] is not None and np.ndim(kw["batch_indices"]) == 3,
        "key": kw["key"] is not None and _member_keys(kw["key"])[3],
    }
    sizes = {k: len(kw[k]) for k, b in batched.items() if b}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"`{k}` {v}" for k, v in sizes.items())
        raise ValueError(
            f"The batched arguments must have one entry per member, the same number each; found {listed}. "
            "Members are paired element by element (for a grid, use np.meshgrid)."
        )
    B = next(iter(sizes.values()), 1)
    K = check_chunk_size(_default_chunk(B, checkpoint) if chunk_size is None else chunk_size, B)
    momentum_map = bool(np.max(np.asarray(kw["momentum"], dtype=float)) > 0.0)
    fp = {k: v for k, v in kw.items() if k not in ("devices", "throw")}
    ckpt = open_checkpoint(checkpoint, "closed_sgd_sweep", {**fp, "momentum map": momentum_map}, B, K)
    devs = _resolve_devices(kw["devices"])

    def compute(i0: int, i1: int):
        import dataclasses

        sub: dict[str, Any] = {**kw, "throw": False}
        for k, b in batched.items():
            if b:
                sub[k] = kw[k][i0:i1]
        token = _MOMENTUM_MAP.set(momentum_map)
        try:
            sol = closed_sgd_sweep(**sub)
        finally:
            _MOMENTUM_MAP.reset(token)
        assert sol is not None  # each chunk gathers to every process (gather="all")
        return dataclasses.replace(sol, devices=None)

    parts = run_chunks(chunks(B, K), ckpt, compute, progress, B)
    sol = concat_maps(parts, None if devs is None else tuple(str(x) for x in devs))
    if throw and not sol.successful.all():
        from ..dynamics._train_args import first_nonfinite_step

        bad = [(i, first_nonfinite_step(sol.steps, sol.M[i])) for i in np.flatnonzero(~sol.successful)]
        listed = ", ".join(f"member {i} by step {k} (lr={sol.lr[i]:g})" for i, k in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise FloatingPointError(
            f"The closed map diverged (non-finite M) for {len(bad)} of {B} members: {listed}{more}. "
            "Reduce their `lr`, or pass throw=False to keep the others."
        )
    return _gathered(sol, gather, devs)


def sweep_front_end(args: dict):
    """`solve_sweep` with a host solver, an executor, chunks or a checkpoint."""
    from ._spec import resolve_call

    options = dict(args.pop("options"))
    executor, checkpoint, chunk_size = (options.pop(k, None) for k in ("executor", "checkpoint", "chunk_size"))
    fp = {k: v for k, v in args.items() if k != "devices"}
    fp.update(
        {k: v for k, v in options.items() if k not in ("throw", "progress", "timeout", "memory_budget", "gather")}
    )
    call = resolve_call(options, solver=args["solver"], stepsize_controller=None, saveat=None, adjoint="auto")
    if call.backend != "ode":
        return host_sweep(
            args, options, executor=executor, checkpoint=checkpoint, chunk_size=chunk_size, fingerprint_args=fp
        )
    if executor is not None:
        raise ValueError(
            "`executor` runs host-solver sweeps (solver='lsoda' / 'cvode', method='exact'); a JAX sweep runs "
            "as one compiled program: place it with `devices` (and `chunk_size` / `checkpoint` for chunks)."
        )
    return chunked_sweep(solve_sweep, args, options, checkpoint=checkpoint, chunk_size=chunk_size, fingerprint_args=fp)


_SWEEP_FRONT_END["solve_sweep"] = sweep_front_end
_MAP_FRONT_END["closed_sgd_sweep"] = chunked_map_sweep
