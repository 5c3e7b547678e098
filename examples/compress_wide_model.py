"""Compress a wide model to k_V + 1 neurons with the same predictions at every SGD step
(Theorem 3).

    python examples/compress_wide_model.py

The model is the NQF of a two-layer tanh MLP on m = 200 inputs in R^20 that span a
12-dimensional subspace, so k_V = dim span {Col A(x)} = 13 (rank-2 A(x) = 1/2 [[0, x], [x^T, 0]]).
A width-d = 400 network and its width-(k_V + 1) = 14 compression are both trained in weight
space (`nqf.train_w`, autodiff SGD on W itself) with the same minibatches.
"""

import numpy as np

import nqf

data = nqf.datasets.mlp_data(200, 20, rank=12)  # p = 21 parameters per neuron
model = nqf.NQFModel(data)
d = 400
W0 = 0.3 * np.random.default_rng(0).standard_normal((model.p, d)) / np.sqrt(d)
lr, steps, batch = 0.02, 300, 32

k = nqf.k_V(model)
comp = nqf.compress.theorem3(model, lr=lr, W0=W0)  # d' = k_V + 1, A~ = (d'/d) A, lr~ = (d/d') lr
print(
    f"p = {model.p}, m = {model.m}, k_V = {k}: width {d} -> {comp.d_prime} neurons "
    f"(W0 {W0.shape} -> {comp.W0.shape}), lr {lr} -> {comp.lr:g}"
)

wide = nqf.train_w(model, W0, lr=lr, steps=steps, batch_size=batch, key=1)
small = nqf.train_w(comp.model, comp.W0, lr=comp.lr, steps=steps, batch_size=batch, key=1)
f, f_small = np.asarray(wide.outputs), np.asarray(small.outputs)  # (saved steps, m)
err = np.max(np.abs(f_small - f)) / np.max(np.abs(f))
print(
    f"{steps} SGD steps (batch {batch}): loss {float(wide.loss[0]):.3f} -> {float(wide.loss[-1]):.3f}; "
    f"max relative difference of the predictions, width {d} vs {comp.d_prime}: {err:.1e}"
)
assert err < 1e-10

# The same through the library call behind `nqf compress` (it trains both with the closed map,
# whose cost does not depend on d).
rep = nqf.compression_report(model, lr=lr, steps=steps, W0=W0, batch_size=batch, key=1)
print(
    f"compression_report: d' = {rep['d_prime']} ({rep['kind']}), max rel output error {rep['max_output_rel_error']:.1e}"
)

# Fewer than k_V + 1 neurons is Corollary 3 (`nqf.compress.corollary3`, or d_prime=... here): the
# top d' - 1 eigenpairs of C = (d/d')(M0 - mu0 mu0^T / d) are kept and the error obeys Eq. E24.
