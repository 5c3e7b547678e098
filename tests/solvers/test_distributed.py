"""Sweeps under `jax.distributed` (issue 26): 2 local processes (127.0.0.1, a free port, CPU
collectives over gloo) started by `nqf.solvers.distributed.launch_local`, which ends both processes on a
failure or after its timeout. References: the same sweeps in this one process on one device
(the programs differ in batch shape, so they agree to rounding: <= 1e-13 relative), and the
cross-process argument check (a mismatch names the argument in every process; a peer that does
not arrive gives a TimeoutError naming it; a dead peer ends the others through the heartbeat).
"""

import json
import os
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

import nqf
from nqf.solvers import _distributed as ndist
from nqf.solvers import distributed as nd

# The problems, built the same way in this process and in the launched ones.
SETUP = textwrap.dedent(
    """
    import numpy as np
    import nqf
    from nqf import datasets
    FIG3 = datasets.fig3_data()
    EPS = np.logspace(-9, -2, 5)          # 5 members on 2 devices: padded to 6
    FLOW_KW = dict(eps=EPS, t1=250.0, ts=np.linspace(0.0, 250.0, 11), rtol=1e-10)
    rng = np.random.default_rng(3)
    A = rng.standard_normal((4, 3, 3))
    MODEL = nqf.NQFModel(nqf.DenseData(0.5 * (A + A.transpose(0, 2, 1)), rng.standard_normal(4)))
    MAP_KW = dict(W0=0.3 * rng.standard_normal((3, 3, 4)), lr=np.array([0.005, 0.01, 0.02]),
                  momentum=np.array([0.0, 0.3, 0.6]), key=np.array([5, 6, 7]), batch_size=2, steps=15)
    LAM = rng.standard_normal((6, 48)) / np.sqrt(48)     # coupled commuting data, m = 6 < p = 48
    COUPLED = nqf.CommutingData(LAM, rng.standard_normal(6))
    COUPLED_KW = dict(z0=np.full(48, 1e-3), t1=60.0, ts=np.linspace(0.0, 60.0, 7), stiff=True, rtol=1e-10)
    """
)

SCRIPT = (
    textwrap.dedent(
        """
    import json, sys, time
    from nqf.solvers import distributed as nd
    info = nd.initialize(timeout=60, heartbeat_timeout=20, initialization_timeout=60)
    import jax
    """
    )
    + SETUP
    + textwrap.dedent(
        """
    me = info["process_id"]
    flow = nqf.solve_sweep(FIG3, devices="all", **FLOW_KW)
    maps = nqf.closed_sgd_sweep(MODEL, devices="all", gather="process0", **MAP_KW)
    assert (maps is None) == (me == 1), me   # gather="process0": the others get None
    from nqf.solvers.distributed import shard_modes
    coupled = nqf.solve_flow(shard_modes(COUPLED), **COUPLED_KW)   # Lambda split by columns over both processes
    try:  # different arguments in process 1: the same error, naming the argument, in both
        nqf.closed_sgd_sweep(MODEL, devices="all", **dict(MAP_KW, lr=MAP_KW["lr"] * (1 + me)))
        mismatch = None
    except ValueError as err:
        mismatch = str(err)
    if me == 0:  # process 1 never makes this call: a bounded wait, then a TimeoutError naming it
        from nqf.solvers import _distributed
        _distributed._state["timeout_s"] = 2.0
        t = time.perf_counter()
        try:
            nqf.solve_sweep(FIG3, devices="all", **dict(FLOW_KW, rtol=1e-8))
            stuck = None
        except TimeoutError as err:
            stuck = [str(err), time.perf_counter() - t]
        np.savez(sys.argv[1], ys=flow.ys, steps=flow.stats["num_steps"], M=maps.M, loss=maps.loss,
                 coupled=coupled.ys, coupled_steps=coupled.stats["num_steps"])
    else:
        stuck = None
        time.sleep(4.0)  # alive, but not calling
    print("RESULT " + json.dumps({"info": info, "mismatch": mismatch, "stuck": stuck,
                                  "devices": [str(d) for d in flow.devices]}))
    """
    )
)


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def _result(proc) -> dict:
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


@pytest.mark.slow
def test_two_processes_equal_one_process(tmp_path):
    """solve_sweep (joint mode, 5 members padded to 6) and closed_sgd_sweep (3 members padded to
    4) sharded over 2 processes x 1 CPU device equal the same sweeps in this process on one
    device to rounding; every process gets the full result (gather='process0': only process 0).
    A stiff reduced solve of coupled CommutingData with Lambda split by columns over the two
    processes (`shard_modes`) takes the same steps as one device and agrees to rounding."""
    script, out = tmp_path / "sweeps.py", tmp_path / "out.npz"
    script.write_text(SCRIPT)
    procs = nd.launch_local(script, 2, args=[str(out)], timeout=240, cwd=tmp_path)
    res = [_result(p) for p in procs]
    assert [r["info"]["process_id"] for r in res] == [0, 1]
    assert all(r["info"]["num_processes"] == 2 and r["info"]["devices"] == 2 for r in res)
    assert len(res[0]["devices"]) == 2
    for r in res:
        assert "`lr` differs between process 0 and process(es) [1]" in r["mismatch"], r["mismatch"]
    msg, waited = res[0]["stuck"]
    assert "process 1 did not reach the same call within 2 s" in msg and 1.9 < waited < 30, (msg, waited)
    ns: dict = {}
    exec(SETUP, ns)
    got = np.load(out)
    flow = nqf.solve_sweep(ns["FIG3"], **ns["FLOW_KW"])
    np.testing.assert_array_equal(got["steps"], flow.stats["num_steps"])  # the same shared steps
    assert rel(got["ys"], flow.ys) <= 1e-13
    maps = nqf.closed_sgd_sweep(ns["MODEL"], **ns["MAP_KW"])
    assert rel(got["M"], maps.M) <= 1e-13 and rel(got["loss"], maps.loss) <= 1e-13
    coupled = nqf.solve_flow(ns["COUPLED"], **ns["COUPLED_KW"])  # item 3: Lambda sharded over 2 processes
    assert int(got["coupled_steps"]) == coupled.stats["num_steps"] and rel(got["coupled"], coupled.ys) <= 1e-13


DEAD = textwrap.dedent(
    """
    import os, sys, time
    from nqf.solvers import distributed as nd
    info = nd.initialize(timeout=120, heartbeat_timeout=3, initialization_timeout=60)
    if info["process_id"] == 1:
        os._exit(3)  # a dead peer
    from nqf.solvers import _distributed
    t = time.time()
    try:
        _distributed.check_same_arguments("solve_sweep", {"eps": 1.0})  # waits for process 1
    finally:
        print("waited", time.time() - t, flush=True)
    """
)


@pytest.mark.slow
def test_dead_peer_ends_the_others_within_the_heartbeat_timeout(tmp_path):
    """A peer that dies: the coordination service stops hearing its heartbeats and ends the
    other process (non-zero status) within about heartbeat_timeout = 3 s, long before the
    argument check's own 120 s bound."""
    script = tmp_path / "dead.py"
    script.write_text(DEAD)
    t = time.perf_counter()
    procs = nd.launch_local(script, 2, timeout=90, check=False, grace=60, cwd=tmp_path)
    assert procs[1].returncode == 3
    assert procs[0].returncode not in (0, None), procs[0].stderr[-2000:]
    assert "stopped sending heartbeats" in procs[0].stderr or "another task died" in procs[0].stderr
    assert time.perf_counter() - t < 60


def test_argument_digest_is_canonical():
    """Equal arguments hash equal (fresh copies, addresses in reprs ignored); a changed value,
    dtype, shape or pytree structure changes the hash."""
    a = np.arange(6.0).reshape(2, 3)
    assert ndist.digest(a) == ndist.digest(a.copy()) == ndist.digest(jax.numpy.asarray(a))
    for other in (a + np.eye(2, 3) * 1e-12, a.astype(np.float32), a.reshape(3, 2), [a], None, 1.0):
        assert ndist.digest(other) != ndist.digest(a)
    data = nqf.DenseData(np.stack([np.eye(2), np.ones((2, 2))]), np.array([1.0, 2.0]))
    same = nqf.DenseData(np.stack([np.eye(2), np.ones((2, 2))]), np.array([1.0, 2.0]))
    assert ndist.digest(data) == ndist.digest(same)
    assert ndist.digest(data) != ndist.digest(nqf.DenseData(data.A, np.array([1.0, 2.5])))
    f1, f2 = (lambda x: x), (lambda x: x)  # two objects whose reprs differ only by address
    assert ndist.digest(f1) == ndist.digest(f2)
    k = jax.random.key(1)
    assert ndist.digest(k) == ndist.digest(jax.random.key(1)) != ndist.digest(jax.random.key(2))


def test_one_process_runs_as_before_and_bad_options():
    """In one process nothing is gathered or compared; bad `gather` values and bad launcher
    arguments are refused by name."""
    assert not ndist.spans_processes(jax.devices()) and not ndist.spans_processes(None)
    ndist.check_devices_cover_processes(jax.devices())  # one process: nothing to check
    with pytest.raises(ValueError, match="`gather` must be 'all' or 'process0'; found 'rank0'"):
        nqf.solve_sweep(nqf.DiagonalData(np.array([1.0, 0.5]), np.array([1.0, 1.0])), eps=1e-3, t1=1.0, gather="rank0")
    model = nqf.NQFModel(nqf.DenseData(np.stack([np.eye(2)] * 2), np.ones(2)))
    with pytest.raises(ValueError, match="`gather` must be 'all' or 'process0'; found 0"):
        nqf.closed_sgd_sweep(model, W0=np.eye(2), lr=0.1, steps=2, gather=0)
    with pytest.raises(ValueError, match="`num_processes` must be an integer >= 1; found 0"):
        nd.launch_local("x.py", 0)


def test_launch_local_reports_failures_and_ends_processes(tmp_path):
    """launch_local (no JAX in the scripts: cheap): the processes see their rank in the
    environment; a failing process is named with its stderr and the others are ended; a run past
    the timeout raises TimeoutError and ends all."""
    ok = tmp_path / "ok.py"
    ok.write_text("import os; print(os.environ['NQF_PROCESS_ID'], os.environ['NQF_NUM_PROCESSES'])\n")
    procs = nd.launch_local(ok, 3, timeout=30)
    assert [p.stdout.split() for p in procs] == [[str(i), "3"] for i in range(3)]
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os, sys, time\nif os.environ['NQF_PROCESS_ID'] == '1': sys.exit('boom in 1')\ntime.sleep(60)\n"
    )
    t = time.perf_counter()
    with pytest.raises(RuntimeError, match=r"process 1 exited with status 1; its stderr ends:\nboom in 1"):
        nd.launch_local(bad, 2, timeout=30, grace=0.5)
    assert time.perf_counter() - t < 10  # process 0 (sleeping 60 s) was ended
    slow = tmp_path / "slow.py"
    slow.write_text("import time; time.sleep(60)\n")
    t = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"2 of 2 processes of .*slow.py.* still running after 1 s; all were ended"):
        nd.launch_local(slow, 2, timeout=1.0)
    assert time.perf_counter() - t < 10


SHARD_MODES = textwrap.dedent(
    """
import json, re, sys
import jax, numpy as np, nqf
from nqf.dynamics import rhs_glv_reduced
from nqf.solvers.distributed import shard_modes
assert len(jax.devices()) == 4
rng = np.random.default_rng(7)
m, p = 6, 48
Lam = rng.standard_normal((m, p)) / np.sqrt(p)
d = nqf.CommutingData(Lam, rng.standard_normal(m))
ds = shard_modes(d)
assert ds.Lambda.sharding.spec == jax.sharding.PartitionSpec(None, "p") and len(ds.Lambda.sharding.device_set) == 4
# the reduced GLV right-hand side: per-shard work, one all-reduce of m values
u0 = rng.standard_normal(p) - 3.0
mask = rng.random(p) > 0.1
G = rng.standard_normal(m)
sh = jax.sharding.NamedSharding(ds.Lambda.sharding.mesh, jax.sharding.PartitionSpec("p"))
args1 = (d, 0.01, mask, u0, 0.0)
args4 = (ds, 0.01, jax.device_put(mask, sh), jax.device_put(u0, sh), 0.0)
f = jax.jit(rhs_glv_reduced)
r1, r4 = np.asarray(f(0.5, G, args1)), np.asarray(f(0.5, G, args4))
hlo = f.lower(0.5, G, args4).compile().as_text()
ar = [ln.strip()[:160] for ln in hlo.splitlines() if "all-reduce(" in ln or "all-reduce-start(" in ln]
kw = dict(z0=np.full(p, 1e-3), t1=60.0, ts=np.linspace(0, 60, 7), stiff=True, rtol=1e-10)
a, b = nqf.solve_flow(d, **kw), nqf.solve_flow(ds, **kw)
dd = nqf.DiagonalData(rng.uniform(0.5, 2.0, p), rng.uniform(0.5, 1.5, p))
kd = dict(z0=np.full(p, 1e-4), t1=40.0, ts=np.linspace(0, 40, 5), stiff=True, rtol=1e-10)
c, e = nqf.solve_flow(dd, **kd), nqf.solve_flow(shard_modes(dd, 4), **kd)
try:
    shard_modes(nqf.CommutingData(Lam[:, :46], d.y))
    err = None
except ValueError as x:
    err = str(x)
np.savez(sys.argv[1], r1=r1, r4=r4, a=a.ys, b=b.ys, c=c.ys, e=e.ys)
print(json.dumps({"allreduce": ar, "steps": [int(a.stats["num_steps"]), int(b.stats["num_steps"]), int(c.stats["num_steps"]), int(e.stats["num_steps"])], "err": err, "form": [a.form, type(b).__name__]}))
    """
)


@pytest.mark.slow
def test_modes_sharded_over_four_devices_equal_one_device(tmp_path):
    """`shard_modes` (issue 26, item 3), 4 forced host CPU devices in a subprocess: Lambda (m, p)
    split by columns. The compiled reduced GLV right-hand side has exactly one all-reduce, of the
    m partial outputs, and equals the one-device one; the stiff reduced solve of CommutingData
    takes the same steps and agrees to rounding, the DiagonalData GLV solve bit for bit; p not a
    multiple of the device count is refused by name."""
    script, out = tmp_path / "modes.py", tmp_path / "modes.npz"
    script.write_text(SHARD_MODES)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run(
        [sys.executable, str(script), str(out)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(info["allreduce"]) == 1 and "f64[6]" in info["allreduce"][0], info["allreduce"]
    res = np.load(out)
    assert rel(res["r4"], res["r1"]) <= 1e-14
    assert info["steps"][0] == info["steps"][1] and info["steps"][2] == info["steps"][3]
    assert rel(res["b"], res["a"]) <= 1e-13
    np.testing.assert_array_equal(res["e"], res["c"])
    assert "p = 46 modes must be a multiple of the number of devices (4)" in info["err"]
    d = nqf.CommutingData(np.ones((2, 4)), np.ones(2))  # and the one-process checks of the arguments
    with pytest.raises(TypeError, match="`shard_modes` takes `CommutingData` or `DiagonalData`.*found DenseData"):
        nd.shard_modes(nqf.DenseData(np.stack([np.eye(2)] * 2), np.ones(2)))
    assert rel(nd.shard_modes(d).Lambda, d.Lambda) == 0.0
