"""Batched sweeps (`nqf.solve_sweep`), sharding over devices, and the persistent compilation
cache (`nqf.enable_compilation_cache`).

Members are compared with their own `solve_flow` calls at the same tolerances (bound: 100 * rtol).

- mode="vmap" (lockstep): vmap rounds some batched kernels differently from the single program,
  so a member can take a step or two more or fewer than its single solve; observed <= 5.5e-10
  relative on M at rtol = 1e-10 over 64 fig3 members (4.3e-10 on the 4 members here).
- mode="joint" (shared steps, the default where one atol serves all members): every member takes
  the steps of the most demanding one (max over members of the per-member RMS error), so it is
  at least as accurate as its single solve; the difference is the single solve's own error:
  observed 1.25e-9 relative on M over 64 fig3 members (822 shared steps against 264-456 single;
  the worst member's single solve is 4.7e-9 off a rtol = 1e-13 reference per saved time, the
  joint one 2.9e-10), 2.8e-10 on the 4 members here (620 shared steps against 265-435); joint
  vs vmap: 1.25e-9 (64 members), 1.6e-10 (4 members).

Sharded and unsharded sweeps run the same per-member arithmetic (joint: the error norm's max is
taken across devices, exact in any order) and are compared for exact equality.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nqf
from nqf import datasets
from nqf.stiff import linear_solver_of

RTOL = 1e-10
T1 = 250.0
TS = np.linspace(0.0, T1, 21)
EPS = np.array([1e-9, 1e-6, 1e-4, 1e-2])


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


@pytest.fixture(scope="module")
def fig3():
    return datasets.fig3_data()


@pytest.fixture(scope="module")
def glv_sweep(fig3):
    return nqf.solve_sweep(fig3, eps=EPS, t1=T1, ts=TS, rtol=RTOL)


def test_eps_sweep_matches_solve_flow(fig3, glv_sweep):
    sw = glv_sweep
    assert sw.form == "glv" and len(sw) == 4 and sw.ys.shape == (4, 21, 5)
    assert sw.M.shape == (4, 21, 5, 5) and sw.z.shape == (4, 21, 5) and sw.loss.shape == (4, 21)
    assert sw.successful.all() and np.allclose(sw.atol, RTOL)
    assert sw.mode == "joint"  # GLV: one atol (rtol, log space) for all members
    steps = sw.stats["num_steps"]
    assert steps.shape == (4,) and (steps == steps[0]).all()  # shared steps
    singles = [nqf.solve_flow(fig3, M0=e * np.eye(5), t1=T1, ts=TS, rtol=RTOL) for e in EPS]
    assert steps[0] >= max(s.stats["num_steps"] for s in singles) - 3
    for i, single in enumerate(singles):
        assert rel(sw.M[i], single.M) <= 100 * RTOL
        assert np.allclose(sw.z[i], single.z, rtol=100 * RTOL, atol=0)
        m = sw[i]  # member i as a FlowSolution
        assert isinstance(m, nqf.FlowSolution) and m.form == "glv"
        np.testing.assert_array_equal(m.M, sw.M[i])
        assert m.stats["num_steps"] == int(sw.stats["num_steps"][i])
    assert np.array_equal(sw.eps, EPS)
    # Small init: a later ignition for smaller eps (the loss stays near L(0) longer).
    assert sw.loss[0, 5] > sw.loss[-1, 5]
    # Dense output of a joint member: member i re-solved alone (its own steps).
    np.testing.assert_allclose(sw[1].z_at([T1 / 2]), sw.z[1][10:11], rtol=100 * RTOL)


def test_vmap_mode_lockstep_and_matches_joint(fig3, glv_sweep):
    """mode='vmap': each member keeps its own steps (within a few of its single solve); the two
    modes agree to the tolerance."""
    sw = nqf.solve_sweep(fig3, eps=EPS, t1=T1, ts=TS, rtol=RTOL, mode="vmap")
    assert sw.mode == "vmap"
    for i, e in enumerate(EPS):
        single = nqf.solve_flow(fig3, M0=e * np.eye(5), t1=T1, ts=TS, rtol=RTOL)
        assert rel(sw.M[i], single.M) <= 100 * RTOL
        assert abs(int(sw.stats["num_steps"][i]) - single.stats["num_steps"]) <= 3
        assert sw[i].stats["num_steps"] == int(sw.stats["num_steps"][i])
        assert rel(glv_sweep.M[i], sw.M[i]) <= 100 * RTOL
    assert len(set(sw.stats["num_steps"].tolist())) > 1  # eps = 1e-9 ignites later: more steps


def test_joint_norm_is_max_over_members(fig3):
    """One live member among 15 that do not move (M0 = 0: all modes masked): the joint solve takes
    exactly the live member's own steps and answer. diffrax's default norm (RMS over the whole
    state) would dilute its error by sqrt(16): observed 320 steps instead of 413 and a 7x larger
    error against a rtol = 1e-13 reference."""
    M0 = np.zeros((16, 5, 5))
    M0[0] = 1e-6 * np.eye(5)
    sw = nqf.solve_sweep(fig3, M0=M0, t1=T1, ts=TS, rtol=RTOL)
    single = nqf.solve_flow(fig3, M0=M0[0], t1=T1, ts=TS, rtol=RTOL)
    assert sw.mode == "joint"
    assert abs(int(sw.stats["num_steps"][0]) - single.stats["num_steps"]) <= 2  # observed: equal
    assert rel(sw.M[0], single.M) <= RTOL  # observed 1.1e-15
    assert np.all(sw.M[1:] == 0.0)
    from nqf.solvers._sweep import _member_rms_max

    x = np.zeros((3, 4, 2))
    x[1] = 2.0
    x[2, 0, 0] = 4.0
    assert float(_member_rms_max(x)) == 2.0  # max(0, 2, 4 / sqrt(8))


SEEDS_EPS = [1e-9, 1e-6, 1e-4]


@pytest.fixture(scope="module")
def seed_sweep():
    """Three data sets (fig3 seeds 0-2) paired with three eps values."""
    datas = [datasets.fig3_data(seed=s) for s in range(3)]
    return datas, nqf.solve_sweep(datas, eps=SEEDS_EPS, t1=T1, ts=TS, rtol=RTOL)


def test_data_batch_matches_solve_flow(seed_sweep):
    datas, sw = seed_sweep
    assert sw.ys.shape == (3, 21, 5) and sw.data[2] is datas[2]
    for i, d in enumerate(datas):
        single = nqf.solve_flow(d, M0=SEEDS_EPS[i] * np.eye(5), t1=T1, ts=TS, rtol=RTOL)
        assert rel(sw.M[i], single.M) <= 100 * RTOL
        np.testing.assert_allclose(sw.loss[i], single.loss, rtol=1e-8, atol=1e-8 * single.loss[0])


def test_factor_form_batch_of_M0_matches_solve_flow():
    """Low-rank MLP data in the factor form from a batch of M0 (factored by eigh per member)."""
    d = datasets.mlp_data(12, 3, seed=1)
    rng = np.random.default_rng(0)
    F = 1e-3 * rng.standard_normal((2, 4, 2))
    M0 = np.einsum("bir,bjr->bij", F, F)
    ts = np.linspace(0.0, 20.0, 21)
    M0[1] *= 1e6  # a 1e6x larger member: its own atol = rtol * max|F0| is 1e3x larger
    singles = [nqf.solve_flow(d, M0=M0[i], t1=20.0, ts=ts, rtol=RTOL) for i in range(2)]
    assert all(s.form == "factor" for s in singles)
    for mode in ("auto", "joint"):
        sw = nqf.solve_sweep(d, M0=M0, t1=20.0, ts=ts, rtol=RTOL, mode=mode)
        # per-member atol: auto falls back to vmap; joint rescales each member by its own atol
        assert sw.mode == ("vmap" if mode == "auto" else "joint")
        assert sw.form == "factor" and sw.ys.shape == (2, 21, 4, 4)
        assert sw.atol[1] / sw.atol[0] > 100  # max|F0| ratio (eigh factors of M0)
        for i, single in enumerate(singles):
            assert rel(sw.M[i], single.M) <= 100 * RTOL
            np.testing.assert_allclose(sw.loss[i], single.loss, rtol=1e-8, atol=1e-8 * single.loss[0])
        assert not np.allclose(sw.loss[0], sw.loss[1])


SHARD_SCRIPT = textwrap.dedent(
    """
    import json, sys, numpy as np, jax
    import nqf
    assert len(jax.devices()) == 2, jax.devices()
    # The seed sweep of test_data_batch_matches_solve_flow, 3 members padded to 4 on 2 devices.
    datas = [nqf.datasets.fig3_data(seed=s) for s in range(3)]
    kw = dict(eps=[1e-9, 1e-6, 1e-4], t1=250.0, ts=np.linspace(0.0, 250.0, 21), rtol=1e-10,
              devices="all")
    b = nqf.solve_sweep(datas, **kw)  # joint
    v = nqf.solve_sweep(datas, mode="vmap", **kw)
    assert len(b.devices) == 2 and b.mode == "joint" and v.mode == "vmap"
    # stiff: DiagonalData shards in both modes; dense-LU and Woodbury-vmap stiff sweeps refuse
    pl = nqf.datasets.powerlaw_data(30)
    stiff_kw = dict(eps=[1e-6, 1e-4, 1e-2], t1=50.0, ts=[0.0, 10.0, 50.0], stiff=True, rtol=1e-8)
    st = {m: nqf.solve_sweep(pl, devices="all", mode=m, **stiff_kw).ys for m in ("joint", "vmap")}
    refused = []
    for d, mode in ((nqf.datasets.fig3_data(), "auto"),
                    (nqf.CommutingData(np.random.default_rng(0).random((2, 12)), [1.0, 0.5]), "vmap")):
        try:
            nqf.solve_sweep(d, devices="all", mode=mode, **stiff_kw)
        except NotImplementedError as err:
            refused.append(str(err))
    np.savez(sys.argv[1], ys=b.ys, steps=b.stats["num_steps"], ys_v=v.ys, steps_v=v.stats["num_steps"],
             stiff_joint=st["joint"], stiff_vmap=st["vmap"])
    print(json.dumps({"refused": refused}))
    """
)


def _run(script, env_extra, tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if k != "NQF_COMPILATION_CACHE"}
    # this process's XLA flags (the suite's optimization level: bit-for-bit comparisons) and the extra ones
    env.update(env_extra, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {env_extra.get('XLA_FLAGS', '')}".strip())
    out = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_sharded_over_two_cpu_devices_is_identical(tmp_path, seed_sweep):
    """The same sweep sharded over 2 host CPU devices (a subprocess: the device count is fixed
    when JAX starts) equals the unsharded one bit for bit, in both modes (joint: each device
    integrates its shard, and the error norm's max over members is also taken over the devices,
    so all devices take the unsharded solve's steps; padding repeats a member, which leaves the
    max unchanged)."""
    out = tmp_path / "sharded.npz"
    info = _run(SHARD_SCRIPT, {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}, tmp_path, str(out))
    res = np.load(out)
    pl = datasets.powerlaw_data(30)
    stiff_kw = dict(eps=[1e-6, 1e-4, 1e-2], t1=50.0, ts=[0.0, 10.0, 50.0], stiff=True, rtol=1e-8)
    for mode in ("joint", "vmap"):
        np.testing.assert_array_equal(res[f"stiff_{mode}"], nqf.solve_sweep(pl, mode=mode, **stiff_kw).ys)
    assert len(info["refused"]) == 2
    assert "lineax's dense LU in mode='vmap'" in info["refused"][0] and "devices=None" in info["refused"][0]
    assert "CommutingData in mode='vmap'" in info["refused"][1] and "mode='joint'" in info["refused"][1]
    datas, sw = seed_sweep
    np.testing.assert_array_equal(res["ys"], sw.ys)
    np.testing.assert_array_equal(res["steps"], sw.stats["num_steps"])
    v = nqf.solve_sweep(datas, eps=SEEDS_EPS, t1=T1, ts=TS, rtol=RTOL, mode="vmap")
    np.testing.assert_array_equal(res["ys_v"], v.ys)
    np.testing.assert_array_equal(res["steps_v"], v.stats["num_steps"])


CACHE_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import jax
    import nqf
    d1 = jax.config.jax_compilation_cache_dir
    jax.jit(lambda x: x * 2.0 + 1.0)(jax.numpy.arange(3.0)).block_until_ready()
    files = sorted(os.listdir(d1)) if d1 else []
    d2 = str(nqf.enable_compilation_cache(sys.argv[1] if len(sys.argv) > 1 else None))
    print(json.dumps({"env_dir": d1, "files": files, "fn_dir": d2,
                      "min_time": jax.config.jax_persistent_cache_min_compile_time_secs,
                      "eqx": os.environ.get("EQX_ON_ERROR")}))
    """
)


def test_compilation_cache_env_and_function(tmp_path):
    cache = tmp_path / "jaxcache"
    res = _run(CACHE_SCRIPT, {"NQF_COMPILATION_CACHE": str(cache), "XDG_CACHE_HOME": str(tmp_path / "xdg")}, tmp_path)
    assert res["env_dir"] == str(cache.resolve())
    assert res["files"], "no cache entry written"
    assert res["min_time"] == 0.0 and res["eqx"] == "nan"
    assert res["fn_dir"] == str((tmp_path / "xdg" / "nqf" / "jax").resolve())  # default path
    assert (tmp_path / "xdg" / "nqf" / "jax").is_dir()
    # On by default in this test process too (tests/core/test_cold_start.py covers the default).
    if not os.environ.get("NQF_COMPILATION_CACHE"):
        import jax

        assert jax.config.jax_compilation_cache_dir is not None


def test_enable_compilation_cache_bad_input():
    with pytest.raises(ValueError, match="min_compile_time_secs"):
        nqf.enable_compilation_cache(min_compile_time_secs=-1.0)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(eps=[1e-3, 0.0]), ValueError, r"`eps` must be finite and > 0.*0\.0 at index 1"),
        (dict(eps=[1e-3, np.nan]), ValueError, r"`eps` must be finite and > 0"),
        (dict(eps=-1.0), ValueError, r"`eps` must be finite and > 0"),
        (dict(eps=np.ones((2, 2))), ValueError, r"`eps` must be a scalar or a 1-d array"),
        (dict(eps=[]), ValueError, r"`eps` is empty"),
        (dict(), ValueError, r"exactly one initial condition"),
        (dict(eps=[1e-3], W0=np.eye(5)), ValueError, r"not with `W0`"),
        (dict(M0=np.zeros((2, 4, 4))), ValueError, r"`M0` members must have shape \(5, 5\)"),
        (dict(M0=np.ones((5,))), ValueError, r"2-d\) or a batch"),
        (dict(M0=np.stack([np.eye(5), -np.eye(5)])), ValueError, r"`M0\[1\]` must be positive semi-definite"),
        (dict(eps=[1e-3], form="M-mu"), ValueError, r"does not support form='M-mu'"),
        (dict(eps=[1e-3], atol=[1e-3, 1e-3]), ValueError, r"`atol` must be a scalar or have shape \(1,\)"),
        (dict(eps=[1e-3], devices=99), ValueError, r"more devices than there are"),
        (dict(eps=[1e-3], devices="gpus"), ValueError, r"`devices` must be None, 'all'"),
        (dict(eps=[1e-3], devices=["cpu:7"]), ValueError, r"is not available to JAX here.*xla_force_host"),
        (dict(eps=[1e-3], ts=[0.0, 300.0]), ValueError, r"`ts` must lie inside"),
        (dict(eps=[1e-3], mode="shared"), ValueError, r"`mode` must be 'auto', 'joint' or 'vmap'; found 'shared'"),
        (dict(z0=np.ones(4)), ValueError, r"`z0` must have shape \(5,\) or a batch \(B, 5\); found \(4,\)"),
        (dict(z0=np.array([[1.0, 1, 1, 1, 1], [1, 1, -2, 1, 1]])), ValueError, r"`z0` must be >= 0.*z0\[1, 2\] = -2"),
        (dict(z0=np.ones(5), M0=np.eye(5)), ValueError, r"exactly one initial condition"),
        (dict(z0=np.ones(5), form="M"), ValueError, r"initial state of the GLV form; found form='M'"),
        (
            dict(z0=np.ones((2, 5)), eps=[1e-3, 1e-2]),
            ValueError,
            r"one base `z0` \(5,\).*found `eps` \(2,\) and `z0` \(2, 5\)",
        ),
        (dict(z0=np.zeros((0, 5))), ValueError, r"`z0` is an empty batch; give shape \(5,\) or \(B, 5\)"),
        (dict(z0=[[1e-3] * 5, [1e-3] * 4]), ValueError, r"`z0` must be a rectangular numeric array"),
        (dict(z0=np.ones(5), form="bogus"), ValueError, r"`form` must be one of"),
        (dict(z0=np.ones(5), eps=[0.0]), ValueError, r"`eps` must be finite and > 0"),
    ],
)
def test_bad_inputs(fig3, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        nqf.solve_sweep(fig3, t1=T1, **kwargs)


def test_bad_data_batches(fig3):
    with pytest.raises(ValueError, match=r"Batch sizes do not agree: 2 data sets but 3 initial"):
        nqf.solve_sweep([fig3, fig3], eps=[1e-3, 1e-4, 1e-5], t1=T1)
    with pytest.raises(ValueError, match=r"same shapes; `\w+` has shape \(5.*\) in data\[0\] but \(6"):
        nqf.solve_sweep([fig3, datasets.orthogonal_features_data(np.ones(6))], eps=1e-3, t1=T1)
    with pytest.raises(ValueError, match=r"same type; data\[0\] is CommutingData but data\[1\] is DenseData"):
        nqf.solve_sweep([fig3, nqf.DenseData(np.asarray(fig3.dense()), fig3.y)], eps=1e-3, t1=T1)
    with pytest.raises(ValueError, match=r"same structure"):
        rot = datasets.orthogonal_features_data(datasets.FIG3_R, rotate_basis=True)
        nqf.solve_sweep([fig3, rot], eps=1e-3, t1=T1)
    with pytest.raises(ValueError, match="empty sequence"):
        nqf.solve_sweep([], eps=1e-3, t1=T1)
    with pytest.raises(TypeError, match="not an `NQFModel`"):
        nqf.solve_sweep(nqf.NQFModel(fig3), eps=1e-3, t1=T1)
    with pytest.raises(TypeError, match="sequence"):
        nqf.solve_sweep("fig3", eps=1e-3, t1=T1)


def test_max_steps_per_member(fig3):
    """mode='vmap': the member that runs out of steps is named (or, with throw=False, reported);
    mode='joint': the members share their steps, so all stop together."""
    kw = dict(eps=[1e-9, 1e-1], t1=T1, ts=TS, rtol=RTOL, max_steps=300)
    with pytest.raises(nqf.MaxStepsReached, match=r"Members \[0, 1\] used all max_steps=300.*mode='joint'"):
        nqf.solve_sweep(fig3, **kw)
    j = nqf.solve_sweep(fig3, throw=False, **kw)
    assert j.mode == "joint" and not j.successful.any() and (j.stats["num_steps"] == 300).all()
    kw["mode"] = "vmap"
    with pytest.raises(nqf.MaxStepsReached, match=r"Members \[0\] used all max_steps=300"):
        nqf.solve_sweep(fig3, **kw)
    sw = nqf.solve_sweep(fig3, throw=False, **kw)
    assert sw.successful.tolist() == [False, True]
    assert "maximum number of solver steps" in sw.results[0]
    assert sw.stats["num_steps"][0] == 300 and sw.stats["num_steps"][1] < 300


def test_z0_sweeps_match_solve_flow(fig3):
    """`z0` batches and eps * z0 (GLV mode strengths) give each member's `solve_flow(z0=...)`;
    `eps` alone on commuting data is z0 = eps (M0 = eps I) without a p x p matrix."""
    base = np.array([1e-6, 2e-6, 5e-7, 1e-5, 3e-6])
    by_eps = nqf.solve_sweep(fig3, eps=[1.0, 10.0], z0=base, t1=T1, ts=TS, rtol=RTOL)
    batch = nqf.solve_sweep(fig3, z0=np.stack([base, 10.0 * base]), t1=T1, ts=TS, rtol=RTOL)
    assert by_eps.init_is_z and by_eps.init.shape == (2, 5)
    for i, scale in enumerate([1.0, 10.0]):
        one = nqf.solve_flow(fig3, z0=scale * base, t1=T1, ts=TS, rtol=RTOL)
        assert rel(by_eps.z[i], one.z) < 1e-8 and rel(batch.z[i], one.z) < 1e-8
        np.testing.assert_allclose(by_eps[i].W[-1] @ by_eps[i].W[-1].T, one.M[-1], rtol=1e-7, atol=1e-14)
    with pytest.raises(ValueError, match=r"needs commuting data.*DenseData"):
        nqf.solve_sweep(nqf.DenseData(fig3.dense(), fig3.y), z0=np.ones(5), t1=1.0)


def test_eps_sweep_at_large_p_forms_no_p_by_p_matrix():
    """DiagonalData at p = 2e5 (a p x p matrix would be 320 GB): eps alone is the mode strengths."""
    data = datasets.powerlaw_data(200_000)
    sw = nqf.solve_sweep(data, eps=[1e-6, 1e-4], t1=5.0, ts=[0.0, 5.0], stiff=True, rtol=1e-6)
    assert sw.init.shape == (2, 200_000) and sw.z.shape == (2, 2, 200_000)
    np.testing.assert_allclose(sw.z[:, 0], [[1e-6], [1e-4]] * np.ones((1, 200_000)), rtol=1e-14)
    # mode k = 1 (the fastest) grows; the slow tail barely moves
    assert sw.z[0, 1, 0] > 1e-6 and abs(sw.z[0, 1, -1] / 1e-6 - 1.0) < 1e-3


def test_stiff_woodbury_sweep_with_different_masks_per_member():
    """Members whose z0 vanish on different modes have Jacobian ranges D_mask Lambda^T that no
    single mask's basis spans; the sweep's basis spans every distinct mask (a bug found by a
    new-user trial: the union mask's basis made the Newton iteration fail)."""
    rng = np.random.default_rng(4)
    data = nqf.CommutingData(rng.random((1, 12)) + 0.5, [1.0])
    z0 = np.full((3, 12), 1e-3)
    z0[1, 2:5] = 0.0
    z0[2, 7] = 0.0
    ts = [0.0, 5.0, 50.0]
    for mode in ("joint", "vmap"):
        sw = nqf.solve_sweep(data, z0=z0, t1=50.0, ts=ts, stiff=True, rtol=1e-8, mode=mode, max_steps=4000)
        assert sw.successful.all() and linear_solver_of(sw._problem[1]).Q.shape == (12, 3)
        for i in range(3):
            one = nqf.solve_flow(data, z0=z0[i], t1=50.0, ts=ts, stiff=True, rtol=1e-8)
            np.testing.assert_allclose(sw.z[i], one.z, rtol=1e-6, atol=1e-12)


def test_stiff_sweep_with_dense_newton_defaults_to_vmap(fig3):
    """fig3 has m = p (dense LU Newton): the joint mode would factorize a (B p) x (B p) matrix."""
    sw = nqf.solve_sweep(fig3, eps=[1e-6, 1e-3], t1=20.0, ts=[0.0, 20.0], stiff=True, rtol=1e-8)
    assert sw.mode == "vmap"
    for i, e in enumerate([1e-6, 1e-3]):
        one = nqf.solve_flow(fig3, M0=e * np.eye(5), t1=20.0, ts=[0.0, 20.0], stiff=True, rtol=1e-8)
        np.testing.assert_allclose(sw.z[i], one.z, rtol=1e-6)
