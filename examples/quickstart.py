"""Sudden learning in five modes: solve the closed flow, measure ignition times, compare with
Theorem 6. Runs in a few seconds on a laptop CPU.

    python examples/quickstart.py
"""

import numpy as np

import nqf

data = nqf.datasets.fig3_data()  # m = p = 5, orthogonal features, r = (1, 1/2, ..., 1/16), C_kk = 1
eps = 1e-5
W0 = np.sqrt(eps) * np.eye(5)  # small initialization: M(0) = eps I

sol = nqf.solve_flow(data, W0=W0, t1=250.0)  # t = eta * (GD steps)
exact = nqf.theorem6(data, sol.ts, W0=W0)  # Theorem 6, Eq. E16
r, C = nqf.theorem6_rates(data)

print(f"solver steps: {sol.stats['num_steps']}")
print(f"max relative error of z(t) vs Theorem 6: {np.abs(sol.z / exact.z - 1).max():.2e}")
print("ignition times (z_k = z_k(inf)/2)")
print("  predicted (E19):", np.round(nqf.predicted_ignition_times(r, C, eps), 4))
print("  measured       :", np.round(nqf.measure_ignition_times(sol), 4))
print(f"final loss: {sol.loss[-1]:.3e}")
