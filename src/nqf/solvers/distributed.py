"""Running nqf's sweeps on several processes or machines with JAX's own multi-process runtime
(`jax.distributed`); no scheduler of nqf's own.

The pattern (one script, started once per process by whatever starts processes: `launch_local`
on one machine, ``srun`` / ``mpirun`` / a batch system on a cluster):

```python
import nqf
from nqf.solvers import distributed   # nqf.distributed once wired at the top level
distributed.initialize()              # before any other JAX work; reads the environment
sw = nqf.solve_sweep(data, eps=eps, t1=t1, devices="all")   # the same call in every process
```

With ``devices="all"`` the members are sharded over the devices of all processes (a one-axis
``"batch"`` mesh over `jax.devices()`), every process runs its shard of the one compiled program,
and every process gets the full result (``gather="process0"``: process 0 only, the others get
None). The numbers are those of the same sweep on as many devices in one process (bit for bit:
the program is the same) and those of one device to rounding (measured: 3.2e-14 on log z for 5
fig3 members on 2 devices; bit for bit for the 64-member fig3 sweep on 2 and 4 devices). With ``devices=None`` each process runs its own sweep on its own default
device (no communication, no argument check): the way to run different sweeps per process.

Before the sweep, every process publishes a hash of each argument in the coordination service
and compares them (a bounded wait, `timeout` seconds): different arguments raise a `ValueError`
naming the argument in every process, a process that does not arrive a `TimeoutError` naming it.

**Dead peers.** `initialize`'s `initialization_timeout` bounds the wait for all processes to
connect. Each process sends heartbeats to the coordination service (run by process 0); a process
silent for `heartbeat_timeout` seconds is declared dead and the service tells the others, whose
runtime then ends them with a fatal error (JAX's coordination-service behaviour: its error
poller terminates the process, exit status 134; not a Python exception).
So a dead peer ends the others within about `heartbeat_timeout` seconds (measured with 5 s: the
survivor ended 3-6 s after its peer died), and an argument check waits at most `timeout` seconds.

`shard_modes` splits the mode axis p of commuting data over the devices (coupled problems
larger than one device's memory).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

__all__ = [
    "initialize",
    "launch_local",
    "free_port",
    "shard_modes",
    "ENV_COORDINATOR",
    "ENV_NUM_PROCESSES",
    "ENV_PROCESS_ID",
]

ENV_COORDINATOR = "NQF_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "NQF_NUM_PROCESSES"
ENV_PROCESS_ID = "NQF_PROCESS_ID"


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"The environment variable {name} must be an integer; found {v!r}.") from None


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids=None,
    initialization_timeout: int = 60,
    heartbeat_timeout: int = 30,
    timeout: float = 300.0,
    cpu_collectives: str | None = "gloo",
) -> dict:
    """Join this process to a `jax.distributed` cluster (call once, before any other JAX work).

    Arguments not given are read from the environment: `coordinator_address` ("host:port" of
    process 0) from ``NQF_COORDINATOR_ADDRESS`` (else JAX's ``JAX_COORDINATOR_ADDRESS``),
    `num_processes` from ``NQF_NUM_PROCESSES``, `process_id` from ``NQF_PROCESS_ID``; whatever is
    still missing is left to JAX's cluster detection (SLURM, Open MPI, ...), which
    `jax.distributed.initialize` performs.

    - `initialization_timeout` (s): bound on the wait for all processes to connect.
    - `heartbeat_timeout` (s): a process silent this long is declared dead and the others are
      ended with an error (module docstring).
    - `timeout` (s): bound on the wait at a sweep's cross-process argument check.
    - `cpu_collectives`: the CPU collectives implementation (``"gloo"``, default; None leaves
      JAX's setting), needed for sweeps over CPU devices of several processes.

    **Returns:** {process_id, num_processes, local_devices, devices} (device counts).

    **Raises:** `ValueError` for a bad environment variable or argument; `RuntimeError` if JAX's
    backends are already initialized (call this first) or the cluster cannot be joined within
    `initialization_timeout` (JAX's error).
    """
    import jax

    from . import _distributed as _dist

    coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR) or None
    num_processes = num_processes if num_processes is not None else _env_int(ENV_NUM_PROCESSES)
    process_id = process_id if process_id is not None else _env_int(ENV_PROCESS_ID)
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"`num_processes` must be >= 1; found {num_processes}.")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"`process_id` must be in [0, num_processes={num_processes}); found {process_id}.")
    if not timeout > 0:
        raise ValueError(f"`timeout` must be > 0 seconds; found {timeout!r}.")
    if cpu_collectives is not None:
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
        initialization_timeout=int(initialization_timeout),
        heartbeat_timeout_seconds=int(heartbeat_timeout),
    )
    _dist._state["timeout_s"] = float(timeout)
    return {
        "process_id": jax.process_index(),
        "num_processes": jax.process_count(),
        "local_devices": jax.local_device_count(),
        "devices": jax.device_count(),
    }


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` now (for a local coordinator)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launch_local(
    script: str | os.PathLike,
    num_processes: int = 2,
    *,
    args: Sequence[str] = (),
    timeout: float = 600.0,
    env: dict | None = None,
    cwd=None,
    check: bool = True,
    grace: float = 5.0,
) -> list[subprocess.CompletedProcess]:
    """Run `script` in `num_processes` local Python processes joined by `jax.distributed` (for
    testing and for one multi-core machine): each gets ``NQF_COORDINATOR_ADDRESS``
    (127.0.0.1 and a free port), ``NQF_NUM_PROCESSES`` and ``NQF_PROCESS_ID``, which
    `initialize()` reads. Not a scheduler: it starts the processes and waits for them.

    All processes are ended (killed) when `timeout` seconds have passed, or `grace` seconds
    after one of them exits with a non-zero status, so nothing is left running. `env` adds to (or overrides) the environment (e.g.
    ``XLA_FLAGS``).

    **Returns:** one `subprocess.CompletedProcess` per process (stdout, stderr as text).

    **Raises:** `TimeoutError` after `timeout` s; with `check`, `RuntimeError` naming the first
    process that exited with a non-zero status and the end of its stderr; `ValueError` for
    `num_processes` < 1.
    """
    if not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"`num_processes` must be an integer >= 1; found {num_processes!r}.")
    if not timeout > 0 or not grace >= 0:
        raise ValueError(f"`timeout` must be > 0 and `grace` >= 0 seconds; found {timeout!r}, {grace!r}.")
    port = free_port()
    procs, files, killed = [], [], set()
    try:
        for i in range(num_processes):
            e = dict(os.environ, **(env or {}))
            e.update(
                {ENV_COORDINATOR: f"127.0.0.1:{port}", ENV_NUM_PROCESSES: str(num_processes), ENV_PROCESS_ID: str(i)}
            )
            out, err = _tmpfile(), _tmpfile()
            files += [out, err]
            cmd = [sys.executable, os.fspath(script), *args]
            procs.append(subprocess.Popen(cmd, env=e, cwd=cwd, stdout=out, stderr=err))
        deadline = time.monotonic() + timeout
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"launch_local: {sum(c is None for c in codes)} of {num_processes} processes of "
                    f"{os.fspath(script)!r} still running after {timeout:g} s; all were ended."
                )
            time.sleep(0.05)
        if any(c not in (None, 0) for c in codes):  # let the others exit on their own, then end them
            end = min(time.monotonic() + grace, deadline)
            while any(p.poll() is None for p in procs) and time.monotonic() < end:
                time.sleep(0.05)
    finally:
        for i, p in enumerate(procs):
            if p.poll() is None:
                p.kill()
                killed.add(i)
        for p in procs:
            p.wait()
    results = []
    for i, p in enumerate(procs):
        out, err = files[2 * i], files[2 * i + 1]
        out.seek(0)
        err.seek(0)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out.read(), err.read()))
        out.close()
        err.close()
    if check:  # name a process that failed on its own before one that launch_local ended
        for i, r in sorted(enumerate(results), key=lambda ir: ir[0] in killed):
            if r.returncode != 0:
                tail = "\n".join(r.stderr.strip().splitlines()[-15:])
                raise RuntimeError(
                    f"launch_local: process {i} exited with status {r.returncode}; its stderr ends:\n{tail}"
                )
    return results


def _tmpfile():
    import tempfile

    return tempfile.TemporaryFile(mode="w+t")


def shard_modes(data, devices="all"):
    """Commuting data with its mode axis p sharded over a one-axis ``"p"`` mesh of `devices`
    (``"all"``, an int n, or a list; under `jax.distributed` the devices of every process).

    `CommutingData`: Lambda (m, p) split by columns (``PartitionSpec(None, "p")``), the basis P
    (p, p), if any, by its mode columns, y (m,) replicated. `DiagonalData`: lam and y (p,) split.
    p must be a multiple of the device count. Nothing else changes: `nqf.solve_flow` and the GLV
    right-hand sides run on the result as on the unsharded data, and XLA partitions them (GSPMD):
    each device does the work of its p / n modes (z_k = exp(u_k), Lambda^T G and its share of
    Lambda z), and the reduced GLV right-hand side (`nqf.dynamics.rhs_glv_reduced`, m < p,
    G' = -(8/m)(Lambda z - y)) costs one all-reduce of the m partial outputs per evaluation
    (checked on the compiled program in the tests). Lambda of size m x p / n per device: a
    problem too large for one device's memory can be solved on several.

    **Returns:** the data set, of the same type, with sharded arrays.

    **Raises:** `TypeError` for data that is not `CommutingData` / `DiagonalData`; `ValueError`
    if p is not a multiple of the number of devices, or for unavailable devices.
    """
    import equinox as eqx
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from ..data._operators import CommutingData, DiagonalData
    from . import _distributed as _dist
    from ._sweep import _resolve_devices

    if not isinstance(data, (CommutingData, DiagonalData)):
        raise TypeError(
            f"`shard_modes` takes `CommutingData` or `DiagonalData` (data with a mode axis p); found {type(data).__name__}."
        )
    devs = _resolve_devices(devices)
    assert devs is not None
    n = len(devs)
    if data.p % n:
        raise ValueError(
            f"`shard_modes`: p = {data.p} modes must be a multiple of the number of devices ({n}); pad the "
            "data with zero modes (lambda = 0 columns) or use fewer devices."
        )
    mesh = Mesh(np.array(devs), ("p",))
    put = _dist.put if _dist.spans_processes(devs) else jax.device_put

    def on(x, spec):
        return put(x, NamedSharding(mesh, spec))

    if isinstance(data, DiagonalData):
        return eqx.tree_at(
            lambda d: (d.lam, d.y), data, (on(data.lam, PartitionSpec("p")), on(data.y, PartitionSpec("p")))
        )
    out = eqx.tree_at(
        lambda d: (d.Lambda, d.y), data, (on(data.Lambda, PartitionSpec(None, "p")), on(data.y, PartitionSpec()))
    )
    if data.P is not None:
        out = eqx.tree_at(lambda d: d.P, out, on(data.P, PartitionSpec(None, "p")))
    return out
