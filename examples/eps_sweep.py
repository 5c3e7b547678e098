"""Sweep the initial scale eps and watch the plateaus sharpen (Theorems 6 and 9, Eq. E19).

    python examples/eps_sweep.py               # writes eps_sweep.png (see NQF_EXAMPLES_OUT)

On the rescaled time tau = t / ln(1/eps) mode k of the Fig. 3 data ignites at
tau*_k -> 1/r_k as eps -> 0, and its transition gets steeper: z_k / z_k(inf) is logistic with
maximal slope r_k ln(1/eps) / 4 in tau, so the loss curve tends to a staircase with steps at
1/r_k. The sweep is a plain loop over `nqf.solve_flow` (`nqf.solve_sweep` solves a whole grid in one
compiled call, see docs/performance.md); the saved times have the same shape for
every eps, so the flow is compiled once and reused.
"""

import os
import pathlib
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import nqf

out = pathlib.Path(os.environ.get("NQF_EXAMPLES_OUT") or tempfile.mkdtemp(prefix="nqf-examples-"))
out.mkdir(parents=True, exist_ok=True)

data = nqf.datasets.fig3_data()  # m = p = 5, r = (1, 1/2, ..., 1/16), C_kk = 1
r, C = nqf.theorem6_rates(data)
tau = np.linspace(0.0, 24.0, 2001)  # rescaled time tau = t / ln(1/eps)
eps_values = (1e-2, 1e-4, 1e-6, 1e-8, 1e-10)

fig, ax = plt.subplots(figsize=(6.5, 4))
slopes = []
for eps in eps_values:
    ln = np.log(1 / eps)
    # dense=True with a small max_steps: the dense interpolant that measure_ignition_times needs
    # is built during the solve (the default re-solves lazily on first use).
    sol = nqf.solve_flow(data, W0=np.sqrt(eps) * np.eye(5), t1=tau[-1] * ln, ts=tau * ln, dense=True, max_steps=2048)
    tau_half = nqf.measure_ignition_times(sol) / ln  # where z_k = z_k(inf) / 2
    slope = np.max(np.diff(sol.z[:, 0] / sol.z_inf[0]) / np.diff(tau))  # steepest rise of mode 1
    slopes.append(slope)
    print(
        f"eps = {eps:.0e}: tau*_k = {np.round(tau_half, 2)}; mode 1 max slope in tau {slope:.2f} "
        f"(predicted r_1 ln(1/eps) / 4 = {r[0] * ln / 4:.2f})"
    )
    ax.plot(tau, sol.loss, label=f"eps = {eps:.0e}")

# eps -> 0: mode k jumps from 0 to z_k(inf) at tau = 1/r_k (a staircase).
z_inf = nqf.glv_equilibrium(data)
stairs = np.array(
    [np.mean((np.asarray(data.outputs_z(np.where(tk >= 1 / r, z_inf, 0.0))) - data.y) ** 2) for tk in tau]
)
ax.plot(tau, stairs, "k--", lw=1, label="eps -> 0 (steps at 1/r_k)")
ax.set(
    xlabel="tau = t / ln(1/eps)",
    ylabel="loss",
    yscale="log",
    title="plateaus sharpen as eps -> 0",
    xlim=(0, 20),
    ylim=(1e-5, 2 * stairs[0]),
)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out / "eps_sweep.png", dpi=120)
print(f"1/r_k = {np.round(1 / r, 2)}")
print(f"wrote {out / 'eps_sweep.png'}")
assert all(a < b for a, b in zip(slopes, slopes[1:])), "transitions must sharpen as eps decreases"
