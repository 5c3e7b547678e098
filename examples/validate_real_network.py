"""Validate a theorem three ways: the exact solution (oracle), the closed flow, and a real
network trained by gradient descent in weight space.

    python examples/validate_real_network.py   # writes validate_real_network.png (NQF_EXAMPLES_OUT)

The network is f(W, x) = sum_i tanh(w_i^T x)^2 with d = 4 neurons w_i in R^4. Its NQF is
A(x) = x x^T (extracted by autodiff below); on the inputs x_mu = a_mu e_mu the matrices are
diagonal with orthogonal features, so Theorem 6 gives every mode strength z_k = (W W^T)_kk in
closed form (Eq. E16) and its ignition time (Eq. E19). The network departs from its NQF by the
tanh's curvature, O(z a^2) relative, and gradient descent from the flow by O(lr).
"""

import os
import pathlib
import tempfile

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import nqf

out = pathlib.Path(os.environ.get("NQF_EXAMPLES_OUT") or tempfile.mkdtemp(prefix="nqf-examples-"))
out.mkdir(parents=True, exist_ok=True)


def network(W, x):  # W (p, d): one neuron per column
    return jnp.sum(jnp.tanh(W.T @ x) ** 2)


p = m = 4
a = np.sqrt(50.0 * np.array([1.0, 0.5, 0.25, 0.125]))  # input scales a_mu
x = np.diag(a)  # x_mu = a_mu e_mu
y = np.full(m, 0.01)  # labels
eps, t1, lr = 1e-9, 160.0, 0.002
W0 = np.sqrt(eps) * np.eye(p)  # M(0) = eps I

# 1. The NQF of the network, by autodiff, and the oracle's assumption.
A = np.asarray(nqf.extract(network, x, p, y=y).dense())  # (m, p, p), here a_mu^2 e_mu e_mu^T
assert np.allclose(A, np.einsum("mk,kj->mkj", np.einsum("mkk->mk", A), np.eye(p)), atol=1e-12)  # diagonal
data = nqf.CommutingData(np.einsum("mkk->mk", A), y)  # A_mu = diag(Lambda_mu): commuting data
r, C = nqf.theorem6_rates(data)  # checks Theorem 6's assumption (else nqf.AssumptionError)
print("growth rates r_k:", np.round(r, 4), " self-competition C_kk:", np.round(C, 1))

# 2. Oracle (Theorem 6) and flow on the same times.
ts = np.linspace(0.0, t1, 801)
exact = nqf.theorem6(data, ts, W0=W0)
sol = nqf.solve_flow(data, W0=W0, t1=t1, ts=ts, rtol=1e-11)  # default rtol 1e-10 gives ~1e-8 here
z_exact, z_flow = np.asarray(exact.z), np.asarray(sol.z)  # z_k = M_kk (the data is diagonal)
flow_err = nqf.validate.relative_error(z_flow, z_exact)
print(f"flow vs Theorem 6: max relative error of z over t in [0, {t1:g}] = {flow_err:.1e}")


# 3. The real network, full-batch gradient descent on the MSE loss, t = lr * steps.
def loss(W):
    f = jax.vmap(network, in_axes=(None, 0))(W, jnp.asarray(x))
    return jnp.mean((f - y) ** 2)


@jax.jit
def gd(W):
    def step(W, _):
        W = W - lr * jax.grad(loss)(W)
        return W, jnp.diag(W @ W.T)

    return jax.lax.scan(step, W, None, length=int(round(t1 / lr)))[1]


z_net = np.vstack([np.diag(W0 @ W0.T), np.asarray(gd(jnp.asarray(W0)))])
t_net = lr * np.arange(len(z_net))
z_net_at_ts = np.stack([np.interp(ts, t_net, z_net[:, k]) for k in range(p)], axis=1)
net_err = np.max(np.abs(z_net_at_ts - z_exact) / z_exact.max(axis=0))  # relative to each z_k(inf)

# Ignition times: E19 vs the flow vs the network (first time z_k reaches z_k(inf) / 2).
pred = nqf.predicted_ignition_times(r, C, np.diag(W0 @ W0.T))
flow_t = nqf.measure_ignition_times(sol)
net_t = np.array([t_net[np.argmax(z_net[:, k] >= 0.5 * z_net[-1, k])] for k in range(p)])
print("ignition times t*_k  E19:    ", np.round(pred, 2))
print("                     flow:   ", np.round(flow_t, 2))
print("                     network:", np.round(net_t, 2))
print(
    f"network vs Theorem 6: max |z_net - z| / z(inf) = {net_err:.1e}; "
    f"ignition times within {np.max(np.abs(net_t / pred - 1)):.1%}"
)
assert flow_err < 1e-8
assert net_err < 0.05 and np.allclose(net_t, pred, rtol=0.02)

fig, ax = plt.subplots(figsize=(6.5, 4))
for k in range(p):
    (line,) = ax.plot(ts, z_exact[:, k] / z_exact[-1, k], lw=2, alpha=0.5, label=f"Theorem 6, k = {k + 1}")
    ax.plot(ts, z_flow[:, k] / z_exact[-1, k], "--", color="k", lw=0.8)
    ax.plot(t_net[::2000], z_net[::2000, k] / z_exact[-1, k], "o", mfc="none", color=line.get_color())
ax.set(
    xlabel="t = lr * steps",
    ylabel="z_k / z_k(inf)",
    title="oracle (thick), flow (dashed), tanh network by GD (circles)",
)
ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(out / "validate_real_network.png", dpi=120)
print(f"wrote {out / 'validate_real_network.png'}")
