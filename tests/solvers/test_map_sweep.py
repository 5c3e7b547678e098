"""`nqf.closed_sgd_sweep`: many discrete-map runs in one compiled call (issue 14).

References: each member's own `closed_sgd` call (to 1e-12 relative), weight-space training
(`train_w`, an independent autodiff computation, to 1e-12), and the same sweep sharded over 2
host CPU devices in a subprocess (the device count is fixed when JAX starts), to rounding.
"""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nqf

P, MS, D, STEPS, B = 3, 4, 4, 20, 4
TOL = 1e-12

_rng = np.random.default_rng(11)
_A = _rng.standard_normal((MS, P, P))
MODEL = nqf.NQFModel(
    nqf.DenseData(0.5 * (_A + _A.transpose(0, 2, 1)), _rng.standard_normal(MS)), g=0.3 * _rng.standard_normal((MS, P))
)
W0S = 0.4 * _rng.standard_normal((B, P, D))
LRS = np.array([0.02, 0.04, 0.06, 0.08])
BETAS = np.array([0.0, 0.3, 0.5, 0.7])
GAMMAS = np.array([0.0, 0.05, 0.0, 0.1])
SEEDS = np.array([5, 6, 7, 8])
SWEEP_KW = dict(W0=W0S, lr=LRS, momentum=BETAS, weight_decay=GAMMAS, key=SEEDS, batch_size=2, steps=STEPS)


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


@pytest.fixture(scope="module")
def sweep():
    return nqf.closed_sgd_sweep(MODEL, **SWEEP_KW)


def test_members_equal_their_own_calls_and_weight_space(sweep):
    assert len(sweep) == B and sweep.M.shape == (B, STEPS + 1, P, P) and sweep.successful.all()
    np.testing.assert_array_equal(sweep.seed, SEEDS)
    for i in range(B):
        kw = dict(lr=LRS[i], momentum=BETAS[i], weight_decay=GAMMAS[i], key=int(SEEDS[i]), batch_size=2, steps=STEPS)
        single = nqf.closed_sgd(MODEL, W0=W0S[i], **kw)
        member = sweep[i]
        assert isinstance(member, nqf.MapTrajectory) and member.lr == LRS[i] and member.d == D
        for f in ("M", "mu", "outputs", "loss", "t", "L"):
            assert rel(getattr(member, f), getattr(single, f)) <= TOL, (i, f)
        ref = nqf.train_w(MODEL, W0S[i], **kw)  # Theorem 2: weight space, autodiff gradients
        assert rel(member.M, ref.M) <= TOL and rel(member.mu, ref.mu) <= TOL
    assert rel(sweep[-1].M, sweep.M[B - 1]) == 0.0
    with pytest.raises(IndexError, match="member index 4 out of range for a sweep of 4 members"):
        sweep[B]
    for bad in (True, 1.0, "0"):
        with pytest.raises(TypeError, match="a sweep's member index must be an integer; found"):
            sweep[bad]


def test_order_parameter_batch_shared_schedule_form_M():
    """Batched (M0, mu0), one shared batch schedule, the literal E5-E7 form."""
    M0s = np.einsum("bid,bjd->bij", W0S, W0S)
    mu0s = W0S.sum(axis=2)
    idx = nqf.batch_indices(3, MS, 2, STEPS)
    sw = nqf.closed_sgd_sweep(
        MODEL, M0=M0s, mu0=mu0s, d=D, lr=0.05, momentum=0.4, batch_indices=idx, steps=STEPS, form="M"
    )
    assert sw.seed is None and sw.P.shape == (B, STEPS + 1, P, P)
    for i in range(B):
        single = nqf.closed_sgd(
            MODEL, M0=M0s[i], mu0=mu0s[i], d=D, lr=0.05, momentum=0.4, batch_indices=idx, steps=STEPS, form="M"
        )
        for f in ("M", "mu", "loss", "P", "Q"):
            assert rel(getattr(sw[i], f), getattr(single, f)) <= TOL, (i, f)


def test_to_dataframe(sweep):
    pd = pytest.importorskip("pandas")
    df = sweep.to_dataframe()
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == ["member", "lr", "momentum", "weight_decay", "seed", "successful", "step", "t", "loss"]
    assert len(df) == B * (STEPS + 1)
    row = df[(df.member == 2) & (df.step == 7)].iloc[0]
    assert row.lr == LRS[2] and row.momentum == BETAS[2] and row.seed == SEEDS[2]
    assert row.t == pytest.approx(LRS[2] * 7) and row.loss == sweep.loss[2, 7]


def test_to_dataframe_without_pandas(sweep, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    with pytest.raises(ImportError, match=r"needs pandas.*pip install pandas"):
        sweep.to_dataframe()


def test_sweep_pickles(sweep):
    back = pickle.loads(pickle.dumps(sweep))
    np.testing.assert_array_equal(back.M, sweep.M)
    np.testing.assert_array_equal(back[1].loss, sweep[1].loss)
    assert back.form == sweep.form and back.d == sweep.d


def test_divergence_is_reported_per_member(sweep):
    kw = dict(SWEEP_KW, lr=[0.05, 50.0, 0.05, 0.05])
    with pytest.raises(FloatingPointError, match=r"for 1 of 4 members: member 1 by step \d+ \(lr=50\)"):
        nqf.closed_sgd_sweep(MODEL, **kw)
    sw = nqf.closed_sgd_sweep(MODEL, throw=False, **kw)
    assert sw.successful.tolist() == [True, False, True, True]
    assert np.isfinite(sw.M[0]).all() and not np.isfinite(sw.M[1]).all()
    df = sw.to_dataframe()  # issue 36: the failed member is flagged in the table
    assert df.groupby("member").successful.all().tolist() == [True, False, True, True]


M0_BAD = np.eye(P)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(lr=[0.01, -1.0]), ValueError, r"`lr` must be finite and > 0; found -1.0 at index 1\."),
        (dict(lr=np.ones((2, 2))), ValueError, r"`lr` must be a scalar or a 1-d array"),
        (dict(lr=[]), ValueError, r"`lr` is empty"),
        (dict(momentum=[0.5, 1.0]), ValueError, r"`momentum` must lie in \[0, 1\); found 1.0 at index 1"),
        (dict(weight_decay=[np.nan]), ValueError, r"`weight_decay` must be finite and >= 0; found nan at index 0"),
        (dict(lr=[0.01, 0.02, 0.03]), ValueError, r"`lr` 3, `W0` 4"),
        (dict(key=[1, 2], batch_size=2), ValueError, r"`W0` 4, `key` 2"),
        (dict(key=[1, 2, 3, 4]), ValueError, r"`key` draws minibatches and needs `batch_size`"),
        (dict(batch_indices=np.zeros((4, STEPS, 2), int), key=1), ValueError, r"Give either `batch_indices`"),
        (
            dict(batch_indices=np.full((4, STEPS, 2), MS)),
            ValueError,
            r"Member 0: `batch_indices` entries must lie in \[0, m=4\)",
        ),
        (dict(W0=np.ones((4, P + 1, D))), ValueError, r"Member 0: `W0` must have shape \(3, d\)"),
        (
            dict(W0=np.ones((2, 4, P, D))),
            ValueError,
            r"`W0` must be one initial condition \(2-d\) or a batch of them \(3-d\)",
        ),
        (
            dict(W0=None, M0=np.stack([np.eye(P), np.diag([1.0, -1.0, 1.0])]), mu0=np.zeros(P), d=D),
            ValueError,
            r"Member 1: `M0` is not realizable",
        ),
        (dict(form="P"), ValueError, r"`form` must be one of"),
        (dict(steps=0), ValueError, r"`steps` must be an integer >= 1"),
        (dict(devices=3), ValueError, r"`devices=3` asks for more devices"),
        (dict(throw=1), TypeError, r"`throw` must be True or False"),
        (dict(throw="no"), TypeError, r"`throw` must be True or False \(a bool\); found str 'no'"),
    ],
)
def test_bad_input(kwargs, exc, match):
    args = dict(W0=W0S, lr=0.01, steps=STEPS)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        nqf.closed_sgd_sweep(MODEL, **args)


SHARD_SCRIPT = textwrap.dedent(
    """
    import json, sys, numpy as np, jax
    sys.path.insert(0, sys.argv[2])
    import test_map_sweep as t
    import nqf
    assert len(jax.devices()) == 2, jax.devices()
    # B = 4 members on 2 devices, and 3 members (padded to 4) with a shared schedule
    a = nqf.closed_sgd_sweep(t.MODEL, devices="all", **t.SWEEP_KW)
    b = nqf.closed_sgd_sweep(t.MODEL, W0=t.W0S[:3], lr=t.LRS[:3], key=3, batch_size=2,
                             steps=t.STEPS, devices=2)
    np.savez(sys.argv[1], M=a.M, L=a.L, loss=a.loss, M3=b.M)
    print(json.dumps({"devices": list(a.devices), "nqf": nqf.__file__}))
    """
)


def test_sharded_over_two_cpu_devices_equals_unsharded(tmp_path, sweep):
    env = {k: v for k, v in os.environ.items() if k != "NQF_COMPILATION_CACHE"}
    # this process's XLA flags (the suite's optimization level: bit-for-bit comparisons) and two host devices
    env["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()
    if env.get("PYTHONPATH"):  # the subprocess runs in tmp_path: keep relative entries valid
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    out = tmp_path / "sharded.npz"
    proc = subprocess.run(
        [sys.executable, "-c", SHARD_SCRIPT, str(out), os.path.dirname(__file__)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(info["devices"]) == 2 and info["nqf"] == nqf.__file__
    res = np.load(out)
    # Members do not interact: sharding changes only how XLA vectorizes the batch (rounding).
    for name in ("M", "L", "loss"):
        assert rel(res[name], getattr(sweep, name)) <= 1e-14, name
    shared = nqf.closed_sgd_sweep(MODEL, W0=W0S[:3], lr=LRS[:3], key=3, batch_size=2, steps=STEPS)
    assert rel(res["M3"], shared.M) <= 1e-14
