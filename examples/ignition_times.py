"""Simulate sudden learning and plot the ignition times: measured on the solved flow vs the
closed form of Eq. E19 (Theorem 6), for the paper's Fig. 3 data.

    python examples/ignition_times.py          # writes ignition_times.png (see NQF_EXAMPLES_OUT)

Mode k of commuting data with orthogonal features is logistic with growth rate r_k and
self-competition C_kk; from z_k(0) = eps it reaches half its final value at
t*_k = (1/r_k) ln((r_k - C_kk eps) / (C_kk eps)) ~ (1/r_k) ln(1/eps): one plateau per mode.
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
eps = 1e-5
W0 = np.sqrt(eps) * np.eye(5)
sol = nqf.solve_flow(data, W0=W0, t1=250.0, ts=np.linspace(0.0, 250.0, 1001))

r, C = nqf.theorem6_rates(data)
z0 = np.full(5, eps)
rows = []
for rho in (0.1, 0.5, 0.9):
    predicted = nqf.predicted_ignition_times(r, C, z0, rho=rho)  # Eq. E19
    measured = nqf.measure_ignition_times(sol, rho=rho)  # root finding on the dense interpolant
    rel = np.abs(measured / predicted - 1)
    rows.append((rho, predicted, measured))
    print(f"rho = {rho}: predicted {np.round(predicted, 3)}")
    print(f"           measured  {np.round(measured, 3)}  (max rel error {rel.max():.1e})")
    assert rel.max() < 1e-6

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
zr = sol.z / sol.z_inf  # z_k(t) / z_k(inf)
for k in range(5):
    (line,) = ax1.plot(sol.ts, zr[:, k], label=f"mode {k + 1}, r = {r[k]:g}")
    ax1.axvline(rows[1][1][k], color=line.get_color(), ls=":", lw=1)
ax1.axhline(0.5, color="gray", lw=0.5)
ax1.set(xlabel="t = eta * steps", ylabel="z_k(t) / z_k(inf)", title="flow; dotted: E19 at rho = 1/2")
ax1.legend(fontsize=7)
for rho, predicted, measured in rows:
    ax2.plot(1 / r, predicted, "o-", mfc="none", label=f"E19, rho = {rho}")
    ax2.plot(1 / r, measured, "k.", ms=4)
ax2.set(xlabel="1 / r_k", ylabel="t*_k", title="ignition times: E19 (lines) vs measured (dots)")
ax2.legend(fontsize=7)
fig.tight_layout()
fig.savefig(out / "ignition_times.png", dpi=120)
print(f"wrote {out / 'ignition_times.png'}")
