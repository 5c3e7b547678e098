"""Sweeps over several processes (`jax.distributed`, issue 26) and over forced host devices:
the 64-member fig3 eps sweep of `bench_sweep.py` (GLV form, eps = 1e-12 .. 1e-2, rtol 1e-10,
201 saved times) in

- 1 process x 1 device (``devices=None``, the baseline),
- 2 processes x 1 CPU device each (`nqf.solvers.distributed.launch_local`, gloo collectives,
  ``devices="all"``),
- 1 process x 2 and x 4 forced host devices (``XLA_FLAGS=--xla_force_host_platform_device_count``),

each in the joint mode (shared steps: one max-collective per step) and the vmap mode (no
collective until the result is gathered). Every configuration runs in its own fresh process(es),
compiles once, then times `REPEAT` calls (best; in the 2-process case after a barrier, on process
0); the result is checked against the baseline (equal to <= 1e-13 relative).

Plain script: ``PYTHONPATH=src python benchmarks/bench_distributed.py [--repeat N]`` prints a
table (``NQF_BENCH_MEMBERS=512`` for a larger sweep) and writes ``benchmarks/results/distributed.json``; with ``--rhs`` it times the reduced GLV
right-hand side of coupled CommutingData at m = 100, p = 1e6 (Lambda 800 MB) on one device,
sharded over 4 forced host devices (`nqf.solvers.distributed.shard_modes`), and one shard's work
alone, and writes ``benchmarks/results/distributed_rhs.json``. asv: `DistributedSweep` runs the same
measurement (one `track_` per configuration and mode, the speed-up baseline / configuration).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

N = int(os.environ.get("NQF_BENCH_MEMBERS", "64"))  # members; the worker processes inherit it
EPS = np.logspace(-12, -2, N)
T1, RTOL = 250.0, 1e-10
TS = np.linspace(0.0, T1, 201)
REPEAT = 5
CONFIGS = ("1proc_1dev", "2proc_1dev", "1proc_2dev", "1proc_4dev")


def _sweep(mode: str, devices):
    import nqf
    from nqf.datasets import fig3_data

    return nqf.solve_sweep(fig3_data(), eps=EPS, t1=T1, ts=TS, rtol=RTOL, mode=mode, devices=devices)


def _worker(out_path: str, repeat: int, distributed: bool) -> None:
    """Time both modes in this process (after `nqf.distributed.initialize` if `distributed`)."""
    if distributed:
        from nqf.solvers import distributed as nd

        nd.initialize(timeout=120)
    import jax

    devices = "all" if jax.device_count() > 1 else None
    res: dict = {"devices": jax.device_count(), "processes": jax.process_count()}
    for mode in ("joint", "vmap"):
        t = time.perf_counter()
        sol = _sweep(mode, devices)  # compile
        res[f"{mode}_first_s"] = time.perf_counter() - t
        times = []
        for _ in range(repeat):
            if distributed:
                from jax.experimental import multihost_utils

                multihost_utils.sync_global_devices(f"bench {mode} {len(times)}")
            t = time.perf_counter()
            _sweep(mode, devices)
            times.append(time.perf_counter() - t)
        res[f"{mode}_s"] = min(times)
        res[f"{mode}_steps"] = int(sol.stats["num_steps"].max())
        if jax.process_index() == 0:
            np.save(f"{out_path}.{mode}.npy", sol.ys)
    if jax.process_index() == 0:
        with open(out_path, "w") as f:
            json.dump(res, f)


RHS_M, RHS_P = 100, 1_000_000  # the coupled problem of the issue: Lambda 800 MB


def _rhs_worker(out_path: str, repeat: int) -> None:
    """The reduced GLV right-hand side (`nqf.dynamics.rhs_glv_reduced`) at m = RHS_M, p = RHS_P:
    on one device, on all devices of this process with Lambda split by `shard_modes`, and one
    shard's work alone (p / n modes on one device)."""
    import jax

    import nqf
    from nqf.dynamics import rhs_glv_reduced
    from nqf.solvers.distributed import shard_modes

    rng = np.random.default_rng(0)
    n = jax.device_count()
    Lam = rng.standard_normal((RHS_M, RHS_P)) / np.sqrt(RHS_P)
    d = nqf.CommutingData(Lam, rng.standard_normal(RHS_M))
    u0, mask, G = -3.0 + 0.1 * rng.standard_normal(RHS_P), np.ones(RHS_P, bool), 0.1 * rng.standard_normal(RHS_M)
    f = jax.jit(rhs_glv_reduced)

    def best(args):
        f(0.5, G, args).block_until_ready()
        ts = []
        for _ in range(repeat):
            t = time.perf_counter()
            f(0.5, G, args).block_until_ready()
            ts.append(time.perf_counter() - t)
        return min(ts), np.asarray(f(0.5, G, args))

    one_dev = jax.devices()[0]
    one, r1 = best(jax.device_put((d, 0.0, mask, u0, 0.0), one_dev))
    k = RHS_P // n
    part = nqf.CommutingData(Lam[:, :k], d.y)
    shard, _ = best(jax.device_put((part, 0.0, mask[:k], u0[:k], 0.0), one_dev))
    ds = shard_modes(d)
    sh = jax.sharding.NamedSharding(ds.Lambda.sharding.mesh, jax.sharding.PartitionSpec("p"))
    sharded, rn = best((ds, 0.0, jax.device_put(mask, sh), jax.device_put(u0, sh), 0.0))
    res = {"devices": n, "m": RHS_M, "p": RHS_P, "one_device_s": one, "one_shard_s": shard, "sharded_s": sharded}
    res["rel_diff"] = float(np.abs(rn - r1).max() / np.abs(r1).max())
    with open(out_path, "w") as fh:
        json.dump(res, fh)


def measure_rhs(devices: int = 4, repeat: int = REPEAT) -> dict:
    """`_rhs_worker` in a fresh process with `devices` forced host devices."""
    out = os.path.join(tempfile.mkdtemp(), "rhs.json")
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    cmd = [sys.executable, os.path.abspath(__file__), "--rhs-worker", out, str(repeat)]
    subprocess.run(cmd, env=env, check=True, timeout=900, capture_output=True)
    with open(out) as fh:
        return json.load(fh)


def measure(config: str, repeat: int = REPEAT, tmp: str | None = None) -> dict:
    """One configuration, in fresh process(es): {mode_s, mode_first_s, mode_steps, ...}."""
    tmp = tmp or tempfile.mkdtemp()
    out = os.path.join(tmp, f"{config}.json")
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    ndev = int(config.split("_")[1][0])
    if ndev > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={ndev}"
    here = os.path.abspath(__file__)
    if config.startswith("2proc"):
        from nqf.solvers import distributed as nd

        nd.launch_local(here, 2, args=["--worker", out, str(repeat), "1"], timeout=900, env=env)
    else:
        cmd = [sys.executable, here, "--worker", out, str(repeat), "0"]
        subprocess.run(cmd, env=env, check=True, timeout=900, capture_output=True)
    with open(out) as f:
        res = json.load(f)
    for mode in ("joint", "vmap"):
        res[f"{mode}_ys"] = f"{out}.{mode}.npy"
    return res


def run(repeat: int = REPEAT) -> dict:
    """All configurations: times, speed-ups over 1 process x 1 device, and the largest relative
    difference of each result from that baseline's."""
    tmp = tempfile.mkdtemp()
    table = {c: measure(c, repeat, tmp) for c in CONFIGS}
    base = table["1proc_1dev"]
    ref = {m: np.load(base[f"{m}_ys"]) for m in ("joint", "vmap")}
    for r in table.values():
        for mode in ("joint", "vmap"):
            r[f"{mode}_speedup"] = base[f"{mode}_s"] / r[f"{mode}_s"]
            ys = np.load(r[f"{mode}_ys"])
            r[f"{mode}_rel_vs_1dev"] = float(np.abs(ys - ref[mode]).max() / np.abs(ref[mode]).max())
    for r in table.values():
        for mode in ("joint", "vmap"):
            r.pop(f"{mode}_ys")
    return table


class DistributedSweep:
    """asv: speed-up of each configuration over 1 process x 1 device (best of REPEAT calls each,
    measured in fresh processes in setup_cache)."""

    timeout = 1800
    params = [list(CONFIGS[1:]), ["joint", "vmap"]]
    param_names = ["config", "mode"]

    def setup_cache(self):
        return run(REPEAT)

    def track_speedup(self, table, config, mode):
        return table[config][f"{mode}_speedup"]

    track_speedup.unit = "x"


def _main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--worker":
        _worker(args[1], int(args[2]), args[3] == "1")
        return
    if args and args[0] == "--rhs-worker":
        _rhs_worker(args[1], int(args[2]))
        return
    if "--rhs" in args:  # the sharded coupled right-hand side only
        r = measure_rhs(4, int(args[args.index("--repeat") + 1]) if "--repeat" in args else REPEAT)
        print(json.dumps(r))
        out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "distributed_rhs.json")
        with open(out, "w") as fh:
            json.dump(dict(r, loadavg_before=os.getloadavg()), fh, indent=1)
        return
    repeat = int(args[args.index("--repeat") + 1]) if "--repeat" in args else REPEAT
    load = os.getloadavg()
    table = run(repeat)
    print(f"{N}-member fig3 eps sweep; best of {repeat}; load average before: {load[0]:.2f}")
    print(f"{'config':<12} {'mode':<6} {'time ms':>9} {'first s':>8} {'speedup':>8} {'rel vs 1 dev':>13}")
    for c, r in table.items():
        for mode in ("joint", "vmap"):
            print(
                f"{c:<12} {mode:<6} {1e3 * r[f'{mode}_s']:9.1f} {r[f'{mode}_first_s']:8.2f} "
                f"{r[f'{mode}_speedup']:8.2f} {r[f'{mode}_rel_vs_1dev']:13.2e}"
            )
    table["meta"] = {"repeat": repeat, "members": N, "loadavg_before": load, "cpus": os.cpu_count()}
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "distributed.json")
    with open(out, "w") as f:
        json.dump(table, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    _main()
