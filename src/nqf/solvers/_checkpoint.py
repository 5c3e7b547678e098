"""Checkpoint and resume for long sweeps: ``solve_sweep(..., checkpoint=PATH, chunk_size=K)`` and
``closed_sgd_sweep(..., checkpoint=PATH, chunk_size=K)``.

A chunked sweep runs its B members in chunks of K consecutive members (the last one may be
shorter): each chunk is one sweep call of the same function on those members' arguments (one
compiled sub-sweep; for the host solvers, one task of `nqf.solvers._executor`), and the chunks'
results are concatenated along the member axis. With `checkpoint`, every finished chunk is
written at once to the directory PATH in `nqf.save`'s format (``part-<i0>-<i1>.npz``, written
to a temporary name ``...tmp-<pid>@<host>...`` and renamed, so a killed sweep never leaves a
half-written part; a resume deletes such temporary files whose writer is gone), next to a
``manifest.json`` holding a fingerprint of the arguments; each part holds that fingerprint and
its member range too, and a part whose fingerprint or range is not the manifest's (copied from
another sweep), or that cannot be read (truncated, corrupted), is refused with a `ValueError`
naming the file (delete it to recompute that chunk). A rerun with the same arguments reads
the finished chunks and runs only the others: killing a sweep loses at most the chunks in
flight. A rerun whose arguments differ (any of them, including `chunk_size`, or the nqf / JAX
version) is refused with a `ValueError` naming the arguments that differ, so a checkpoint never
mixes members of two different sweeps.

**Identity.** The chunk boundaries depend only on B and K, and every chunk is computed by the
same program whether it is run now or read back (a part holds the chunk's arrays bit for bit), so
a checkpointed sweep, killed and resumed any number of times, returns exactly (bitwise) what the
same call without `checkpoint` returns (same `chunk_size`). Against ONE call over all members
(``chunk_size=None``) the members agree to the solver tolerance, not bitwise: in the joint mode
members share their steps within a sub-sweep (fig3, 8 eps members, rtol 1e-8, chunks of 3:
2.7e-7 on log z), and in the vmap mode XLA's batched kernels round differently at another batch
size (2.6e-13 there). Host solvers (``solver="lsoda"`` / ``"cvode"``, ``method="exact"``) solve
each member alone: bitwise equal to the one-call sweep and to the loop of `solve_flow` calls.
`mode="auto"` is resolved on the whole batch (as the one-call sweep would) so that every chunk
runs the same mode, and `closed_sgd_sweep` runs the momentum map in every chunk if any member
has momentum > 0, as the one-call sweep does; its chunked members agree with one call to
rounding, not bitwise (a vmap at another batch size may round differently: a new-user trial
measured 2.8e-17 to 5.6e-17 with chunks of 2 and 1 members), while a resumed map sweep equals
the same chunked call bitwise.

Numbers are fingerprinted by value (`nqf.solvers._digest`): ints, floats and numeric arrays, and
rectangular lists / tuples of them, as the float64 array of their values when that is exact, so
``t1=20`` resumes ``t1=20.0`` and ``eps=[...]`` resumes ``eps=np.array([...])`` (the sweep
converts them to the same float64 numbers); other values or shapes are refused as before.
Not in the fingerprint (they do not change the numbers): `devices`, ``throw``, ``progress``,
``timeout``, `executor`, ``memory_budget``. Functions in the arguments (a user loss) are
fingerprinted by what they compute: a Python function by its qualified name, its code (bytecode,
names, constants, nested code objects), its defaults, its closure cells and the data globals
(numbers, strings, arrays) its code names, each value fingerprinted recursively; a
`functools.partial` by its function, arguments and keywords; a bound method by its function and
instance; a wrapper such as ``jax.jit(f)`` by ``f``; an Equinox module as a pytree. Limits: a
function or module that the code reaches through a global name is fingerprinted by that name,
not its code, and a callable without Python code (a builtin, a numpy ufunc) by its repr (its
name); change such a callable's behaviour and the fingerprint does not see it, so give a new
`checkpoint` directory. The same encoding is the jax.distributed same-arguments check's
(`nqf.solvers._distributed.digest`), except that it keeps dtypes and containers of numbers apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from .._core._checks import check_int
from .._core._version import __version__
from .._core.io import load, save
from ._digest import feed_by_value

__all__ = ["SweepProgress"]

FORMAT, VERSION = "nqf-checkpoint", 3  # 2: parts carry the fingerprint; 3: numbers hashed by value


class SweepProgress(NamedTuple):
    """What a chunked or host sweep reports to its ``progress`` callable after each finished chunk.

    - `done`: members finished so far (read from the checkpoint included); `total`: B.
    - `members`: the member indices of the chunk just finished (a `range`).
    - `errors`: {member index: exception} of that chunk's members that raised (host solvers;
      empty otherwise).
    - `from_checkpoint`: True if the chunk was read from the checkpoint rather than computed.
    """

    done: int
    total: int
    members: range
    errors: dict
    from_checkpoint: bool


def report(progress, event: SweepProgress) -> None:
    """Call the ``progress`` option: None/False (nothing), True (one line on stderr) or a callable."""
    if progress is None or progress is False:
        return
    if progress is True:
        import sys

        r = event.members
        how = " (from checkpoint)" if event.from_checkpoint else ""
        bad = f", {len(event.errors)} failed: {sorted(event.errors)}" if event.errors else ""
        print(
            f"nqf sweep: members {r.start}..{r.stop - 1} done{how}{bad} ({event.done}/{event.total})", file=sys.stderr
        )
        return
    progress(event)


def check_progress(progress) -> None:
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(
            f"`progress` must be None, True/False or a callable taking an nqf SweepProgress; found {progress!r}."
        )


def check_chunk_size(chunk_size, B: int) -> int:
    """The chunk size K (1 <= K; a K above B is B)."""
    return min(check_int(chunk_size, "chunk_size", what="members per chunk"), B)


def chunks(B: int, K: int) -> list[tuple[int, int]]:
    return [(i, min(i + K, B)) for i in range(0, B, K)]


# ------------------------------------------------------------------------------------------
# Fingerprint of the arguments


def fingerprints(args: dict) -> dict:
    """{argument name: sha256 hex of its canonical encoding} (plus the library versions)."""
    out = {}
    for name, value in {**args, "nqf version": __version__, "jax version": jax.__version__}.items():
        h = hashlib.sha256()
        feed_by_value(h, value)
        out[name] = h.hexdigest()
    return out


# ------------------------------------------------------------------------------------------
# The checkpoint directory


class Checkpoint:
    """A checkpoint directory: ``manifest.json`` (function, B, K, argument fingerprints) and one
    ``part-<i0>-<i1>.npz`` (`nqf.save` format) per finished chunk [i0, i1)."""

    def __init__(self, path, function: str, args: dict, B: int, K: int):
        self.path = os.fspath(path)
        self.function, self.B, self.K = function, B, K
        self.removed: list[str] = []  # stale temporary files deleted on resume
        prints = fingerprints(args)
        overall = hashlib.sha256(json.dumps(prints, sort_keys=True).encode()).hexdigest()
        self.fingerprint = overall
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "function": function,
            "members": B,
            "chunk_size": K,
            "fingerprint": overall,
            "arguments": prints,
        }
        mpath = os.path.join(self.path, "manifest.json")
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise ValueError(f"`checkpoint` must be a directory (created if missing); {self.path!r} is a file.")
        if os.path.exists(mpath):
            with open(mpath) as f:
                try:
                    old = json.load(f)
                except json.JSONDecodeError as err:
                    raise ValueError(f"`checkpoint` {self.path!r}: manifest.json is not readable ({err}).") from None
            self._compare(old, manifest)
            self.removed = remove_stale_tmp(self.path)  # a resume: parts half-written by a killed run
        else:
            if os.path.isdir(self.path) and any(n.startswith("part-") for n in os.listdir(self.path)):
                raise ValueError(
                    f"`checkpoint` {self.path!r} holds parts but no manifest.json; give an empty or new directory."
                )
            os.makedirs(self.path, exist_ok=True)
            tmp = mpath + _tmp_tag()
            with open(tmp, "w") as f:
                json.dump(manifest, f, indent=1, sort_keys=True)
            os.replace(tmp, mpath)

    def _compare(self, old: dict, new: dict) -> None:
        if old.get("format") != FORMAT or old.get("version", np.inf) > VERSION:
            raise ValueError(
                f"`checkpoint` {self.path!r}: manifest.json is not an nqf checkpoint this nqf reads "
                f"(format {old.get('format')!r} version {old.get('version')!r})."
            )
        if old.get("fingerprint") == new["fingerprint"]:
            return
        if old.get("version", 0) < VERSION:
            raise ValueError(
                f"`checkpoint` {self.path!r} was written by an older nqf (checkpoint version "
                f"{old.get('version')!r} < {VERSION}: arguments were fingerprinted differently), so it cannot be "
                "matched to this call; give another `checkpoint` directory (or delete this one) to start again."
            )
        if old.get("function") != new["function"]:
            diff = [f"function ({old.get('function')} there, {new['function']} here)"]
        else:
            a, b = old.get("arguments", {}), new["arguments"]
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        raise ValueError(
            f"`checkpoint` {self.path!r} belongs to a sweep with different arguments: "
            f"{', '.join(diff)} {'differs' if len(diff) == 1 else 'differ'} (stored fingerprint {old.get('fingerprint', '')[:12]}, this call "
            f"{new['fingerprint'][:12]}). Rerun with the same arguments to resume, or give another "
            "`checkpoint` directory (or delete this one) to start again."
        )

    def part_path(self, i0: int, i1: int) -> str:
        return os.path.join(self.path, f"part-{i0:07d}-{i1:07d}.npz")

    def load(self, i0: int, i1: int):
        """The saved chunk [i0, i1), or None if it is not there. `ValueError` naming the part
        file if it cannot be read (truncated, corrupted) or belongs to another sweep (its
        fingerprint is not this manifest's)."""
        p = self.part_path(i0, i1)
        if not os.path.exists(p):
            return None
        try:
            stored = load(p)
        except Exception as err:  # noqa: BLE001 - BadZipFile, numpy's allow_pickle ValueError, OSError, ...
            cause = err.__cause__ if isinstance(err, ValueError) and err.__cause__ is not None else err  # io.load's
            raise ValueError(
                f"`checkpoint` part {p!r} (members {i0}..{i1 - 1}) cannot be read: {type(cause).__name__}: "
                f"{str(cause).rstrip().rstrip('.')}. "
                "It is truncated or corrupted; delete it to recompute that chunk."
            ) from err
        if not (isinstance(stored, dict) and set(stored) == {"fingerprint", "members", "part"}):
            raise ValueError(
                f"`checkpoint` part {p!r} (members {i0}..{i1 - 1}) is not a part of an nqf checkpoint "
                "(no fingerprint); delete it to recompute that chunk."
            )
        if stored["fingerprint"] != self.fingerprint or list(stored["members"]) != [i0, i1]:
            raise ValueError(
                f"`checkpoint` part {p!r} belongs to another sweep: its fingerprint "
                f"{str(stored['fingerprint'])[:12]} (members {stored['members']}) is not this checkpoint's "
                f"{self.fingerprint[:12]} (members [{i0}, {i1}]); it was copied or moved here from another "
                "checkpoint directory. Delete it to recompute that chunk."
            )
        return stored["part"]

    def save(self, i0: int, i1: int, obj) -> None:
        """Write the chunk atomically (a temporary file, then a rename), with the manifest's
        fingerprint and the member range, checked on `load`."""
        final = self.part_path(i0, i1)
        tmp = final[: -len(".npz")] + _tmp_tag() + ".npz"
        save({"fingerprint": self.fingerprint, "members": [i0, i1], "part": obj}, tmp)
        os.replace(tmp, final)


_TMP = re.compile(r"^(?:part-\d+-\d+|manifest\.json)\.tmp-(\d+)@(.+?)(?:\.npz)?$")
STALE_TMP_AGE = 3600.0  # seconds: a temporary file of another host older than this is stale


def _tmp_tag() -> str:
    """The temporary-name tag of a file being written: ``.tmp-<pid>@<host>``."""
    return f".tmp-{os.getpid()}@{socket.gethostname()}"


def _alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would end the process there: assume it runs
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists
        return True
    return True


def remove_stale_tmp(path: str) -> list[str]:
    """Delete the temporary files (``part-*.tmp-<pid>@<host>.npz``, ``manifest.json.tmp-...``)
    that a killed or interrupted write left in the checkpoint directory `path`; returns their
    names. A file is stale when its writer is gone: on this host, this process or no process
    with that pid; from another host (a shared file system), when it is older than
    `STALE_TMP_AGE` (its writer may still be running). Never a finished part or the manifest."""
    host, me, out = socket.gethostname(), os.getpid(), []
    for name in sorted(os.listdir(path)):
        m = _TMP.match(name)
        if m is None:
            continue
        full, pid = os.path.join(path, name), int(m.group(1))
        try:
            if m.group(2) == host:
                stale = pid == me or not _alive(pid)
            else:
                stale = time.time() - os.path.getmtime(full) > STALE_TMP_AGE
            if stale:
                os.remove(full)
                out.append(name)
        except OSError:  # removed meanwhile, or not ours to remove: leave it
            continue
    return out


def open_checkpoint(checkpoint, function: str, args: dict, B: int, K: int) -> Checkpoint | None:
    if checkpoint is None:
        return None
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(f"`checkpoint` must be a directory path (str or os.PathLike); found {checkpoint!r}.")
    if not os.fspath(checkpoint).strip():  # '' was os.makedirs' FileNotFoundError
        raise ValueError(
            f"`checkpoint` must be a directory path (e.g. 'sweep-parts'); found an empty path {checkpoint!r}. "
            "Pass checkpoint=None for no checkpoint."
        )
    return Checkpoint(checkpoint, function, {**args, "chunk_size": K}, B, K)


def run_chunks(
    spans: list[tuple[int, int]],
    ckpt: Checkpoint | None,
    compute: Callable[[int, int], Any],
    progress,
    B: int,
) -> list:
    """Each chunk from the checkpoint or computed (and then saved), in order; progress after each."""
    parts, done = [], 0
    for i0, i1 in spans:
        part = None if ckpt is None else ckpt.load(i0, i1)
        fresh = part is None
        if fresh:
            part = compute(i0, i1)
            if ckpt is not None:
                ckpt.save(i0, i1, part)
        parts.append(part)
        done += i1 - i0
        report(progress, SweepProgress(done, B, range(i0, i1), {}, not fresh))
    return parts


# ------------------------------------------------------------------------------------------
# Members of a solve_sweep call: how many, and the arguments of members [i0, i1)


def _leading(x, ndim_batched: int, name: str, sizes: dict):
    if x is not None and np.ndim(x) == ndim_batched:
        sizes[name] = np.shape(x)[0]
        return True
    return False


class SweepSlicer:
    """The batched arguments of a `solve_sweep` call and their member slices (member i of the
    batch is entry i of every batched argument; shared arguments are passed as they are)."""

    def __init__(self, data, eps, M0, W0, z0, atol):
        sizes: dict = {}
        self.data_batched = isinstance(data, Sequence) and not isinstance(data, (str, bytes))
        if self.data_batched:
            sizes["data"] = len(data)
        self.batched = {
            "eps": _leading(eps, 1, "eps", sizes),
            "M0": _leading(M0, 3, "M0", sizes),
            "W0": _leading(W0, 3, "W0", sizes),
            "z0": _leading(z0, 2, "z0", sizes),
            "atol": _leading(atol, 1, "atol", sizes),
        }
        distinct = set(sizes.values())
        if len(distinct) > 1:
            listed = ", ".join(f"`{k}` {v}" for k, v in sizes.items())
            raise ValueError(
                f"Batch sizes do not agree: {listed} (members are paired one to one; every batched "
                "argument needs one entry per member)."
            )
        self.B = distinct.pop() if distinct else 1
        self.values = {"data": data, "eps": eps, "M0": M0, "W0": W0, "z0": z0, "atol": atol}

    def take(self, i0: int, i1: int) -> dict:
        out = {}
        for k, v in self.values.items():
            if k == "data":
                out[k] = list(v[i0:i1]) if self.data_batched else v
            else:
                out[k] = np.asarray(v)[i0:i1] if self.batched[k] else v
        return out


# ------------------------------------------------------------------------------------------
# Assembling chunks


def concat_sweeps(parts: list, datas: list, devices):
    """One `SweepSolution` from the chunks' (in member order), with the live data sets."""
    from ._sweep import SweepSolution

    p0 = parts[0]
    cat = lambda name: np.concatenate([np.asarray(getattr(p, name)) for p in parts])  # noqa: E731
    opt = lambda name: None if getattr(p0, name) is None else cat(name)  # noqa: E731
    stats = {
        k: (p0.stats[k] if k == "max_steps" else np.concatenate([np.asarray(p.stats[k]) for p in parts]))
        for k in p0.stats
    }
    return SweepSolution(
        ts=np.asarray(p0.ts),
        form=p0.form,
        ys=cat("ys"),
        data=datas,
        init=cat("init"),
        init_is_factor=p0.init_is_factor,
        stats=stats,
        results=[r for p in parts for r in p.results],
        successful=cat("successful"),
        atol=opt("atol"),
        eps=opt("eps"),
        devices=devices,
        mode=p0.mode,
        init_is_z=p0.init_is_z,
        _y0=cat("_y0"),
        _mask=opt("_mask"),
        # no `_problem`: chunks have their own; a member's dense output solves it again (as loaded)
        settings=p0.settings,
    )


_MAP_MEMBER_FIELDS = (
    "t",
    "M",
    "mu",
    "outputs",
    "loss",
    "L",
    "P",
    "Q",
    "lr",
    "momentum",
    "weight_decay",
    "seed",
    "successful",
)


def concat_maps(parts: list, devices):
    """One `MapSweep` from the chunks' (in member order)."""
    p0 = parts[0]
    fields = {f.name: getattr(p0, f.name) for f in dataclasses.fields(p0)}
    for name in _MAP_MEMBER_FIELDS:
        if fields[name] is not None:
            fields[name] = np.concatenate([np.asarray(getattr(p, name)) for p in parts])
    fields["devices"] = devices
    return type(p0)(**fields)
