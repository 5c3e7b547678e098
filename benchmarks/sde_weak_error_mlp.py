"""Weak error of the M-space SGD SDE (S1, `nqf.dynamics.sgd_sde(form="M")`) against the exact
minibatch map on non-commuting data: a small two-layer MLP's NQF (`nqf.feedforward_data`,
k = 4 inputs, q = 1 output, p = 5, m = 16 samples, rank-2 A), batch 4 without replacement,
M0 = W0 W0^T with W0 = 0.3 N(0, 1) / sqrt(d), d = 8. Mean of the loss and of the top eigenvalue
of M at t = 2, 4, 6 over N SDE paths vs N maps (independent batch seeds), per eta; the fitted
order of the largest error.

Run: python benchmarks/sde_weak_error_mlp.py [N] [etas...]
"""

import sys
import time

import numpy as np

import nqf
from nqf.dynamics import sgd_sde

K, M_SAMPLES, BATCH, D = 4, 16, 4, 8
T_CHECK = np.array([2.0, 4.0, 6.0])


def problem():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M_SAMPLES, K)) / np.sqrt(K)
    data = nqf.feedforward_data(
        np.tanh(2.0 * x @ rng.standard_normal(K)), a=x[:, :, None], b=np.ones((M_SAMPLES, 1, 1))
    )
    W0 = 0.3 * rng.standard_normal((K + 1, D)) / np.sqrt(D)
    return data, W0 @ W0.T


def main():
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    etas = [float(x) for x in sys.argv[2:]] or [0.01, 0.02, 0.04]
    data, M0 = problem()
    rows = []
    for eta in etas:
        every = int(round(2.0 / eta))
        steps = int(round(T_CHECK[-1] / eta))
        t0 = time.perf_counter()
        mp = nqf.closed_sgd_sweep(
            data, M0=M0, lr=eta, steps=steps, batch_size=BATCH, key=np.arange(N), save_every=every
        )
        t_map = time.perf_counter() - t0
        t0 = time.perf_counter()
        sd = sgd_sde(data, M0, lr=eta, batch_size=BATCH, ts=np.concatenate([[0.0], T_CHECK]), key=7, n_paths=N)
        t_sde = time.perf_counter() - t0
        lm, ls = np.asarray(mp.loss)[:, 1:], sd.loss[:, 1:]
        em = np.linalg.eigvalsh(np.asarray(mp.M)[:, 1:])[..., -1]
        es = np.linalg.eigvalsh(sd.M[:, 1:])[..., -1]
        out = []
        for a, b in ((ls, lm), (es, em)):
            diff = a.mean(0) - b.mean(0)
            se = np.sqrt(a.var(0) / N + b.var(0) / N)
            i = int(np.argmax(np.abs(diff)))
            out += [abs(diff[i]), se[i]]
        rows.append([eta] + out)
        print(
            f"eta={eta:g}: loss mean err {out[0]:.3e} +- {out[1]:.1e}, top-eig mean err {out[2]:.3e} +- {out[3]:.1e}"
            f"  (loss std sde {ls.std(0).round(5)} map {lm.std(0).round(5)}; map {t_map:.1f} s, sde {t_sde:.1f} s)",
            flush=True,
        )
    rows = np.array(rows)
    for col, name in ((1, "loss mean"), (3, "top eigenvalue mean")):
        fit = np.polyfit(np.log(rows[:, 0]), np.log(rows[:, col]), 1)[0]
        print(f"fitted order ({name}): {fit:.3f}  (err/SE {np.round(rows[:, col] / rows[:, col + 1], 1)})")


if __name__ == "__main__":
    main()
