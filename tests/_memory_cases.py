"""Calls of the public API at sizes past the memory budget (issue 36), run in a child process
under an address-space limit by `tests/test_memory_budget.py`.

``python tests/_memory_cases.py LIMIT_BYTES [CASE ...]`` sets ``RLIMIT_AS`` to LIMIT_BYTES
before importing JAX, then runs each case (all by default) and prints one JSON line per case:
``{"case", "error" (the exception's type), "message", "nbytes", "budget", "seconds"}`` with
`seconds` the time of the call alone (its inputs are built first, untimed). A case that is not
refused either fails with another error (e.g. XLA's RESOURCE_EXHAUSTED under the limit) or
returns ("error": null). The address-space limit turns an allocation that the estimate missed
into an error of this process instead of a kill by the kernel's OOM killer.

Each case is (inputs, call): `inputs()` builds the small arrays the call needs, `call(*inputs)`
makes the one call whose size argument is past the budget.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def _cases():
    import numpy as np

    import nqf

    fig3 = nqf.datasets.fig3_data
    I5 = 1e-5 * np.eye(5)
    z5 = np.full(5, 1e-3)
    W5 = 1e-2 * np.eye(5)[:, :2]

    def dense(m, p):
        rng = np.random.default_rng(0)
        F = rng.standard_normal((m, p, 2))
        return nqf.DenseData(np.einsum("mpk,mqk->mpq", F, F) / p, rng.standard_normal(m))

    def mlp():
        import equinox as eqx
        import jax
        import jax.numpy as jnp

        net = eqx.nn.MLP(
            3, 1, 4, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False, key=jax.random.key(0)
        )
        x = np.random.default_rng(0).standard_normal((6, 3))
        return nqf.Network(net), x, np.tanh(x[:, 0])

    return {
        # sgd_sde: paths (the vmapped ensemble and its saved values)
        "sgd_sde n_paths=1e7": (
            lambda: (fig3(),),
            lambda d: nqf.sgd_sde(d, z5, lr=1e-3, batch_size=2, ts=[0.0, 1.0], key=0, n_paths=10**7),
        ),
        "sgd_sde n_paths=1e9": (
            lambda: (fig3(),),
            lambda d: nqf.sgd_sde(d, z5, lr=1e-3, batch_size=2, ts=[0.0, 1.0], key=0, n_paths=10**9),
        ),
        "sgd_sde ts=3e7 points": (
            lambda: (fig3(), np.linspace(0.0, 1.0, 3 * 10**7)),
            lambda d, ts: nqf.sgd_sde(d, z5, lr=1e-3, batch_size=2, ts=ts, key=0, n_paths=4),
        ),
        # closed_sgd: saved states, the batch schedule, step times
        "closed_sgd steps=1e8 save_every=1": (
            lambda: (fig3(),),
            lambda d: nqf.closed_sgd(d, nqf.SGD(1e-3, steps=10**8), M0=I5),
        ),
        "closed_sgd steps=1e9 batch_size=2": (
            lambda: (fig3(),),
            lambda d: nqf.closed_sgd(d, nqf.SGD(1e-3, steps=10**9, batch_size=2, key=0), M0=I5, save_every=10**9),
        ),
        "closed_sgd step_values=loss steps=1e9": (
            lambda: (fig3(),),
            lambda d: nqf.closed_sgd(d, nqf.SGD(1e-3, steps=10**9), M0=I5, save_every=10**9, step_values="loss"),
        ),
        "batch_indices steps=1e9": (lambda: (), lambda: nqf.batch_indices(0, 5, 2, 10**9)),
        # map_term: the saved state of every step, its batch schedule
        "MapTerm.solve(1e9)": (
            lambda: (nqf.map_term(fig3(), nqf.SGD(1e-3, steps=10**9), M0=I5),),
            lambda term: term.solve(10**9),
        ),
        "map_term steps=1e9 batch_size=2": (
            lambda: (fig3(),),
            lambda d: nqf.map_term(d, nqf.SGD(1e-3, steps=10**9, batch_size=2, key=0), M0=I5),
        ),
        # closed_sgd_sweep: members x saved states
        "closed_sgd_sweep 1e5 members x 1e4 steps": (
            lambda: (fig3(), np.linspace(1e-3, 2e-3, 10**5)),
            lambda d, lrs: nqf.closed_sgd_sweep(d, lr=lrs, steps=10**4, M0=I5),
        ),
        # train_w: saved weights, the batch schedule
        "train_w steps=1e8 save_every=1": (
            lambda: (fig3(),),
            lambda d: nqf.train_w(d, W5, lr=1e-3, steps=10**8),
        ),
        "train_w steps=1e9 batch_size=2": (
            lambda: (fig3(),),
            lambda d: nqf.train_w(d, W5, lr=1e-3, steps=10**9, batch_size=2, key=0, save_every=10**9),
        ),
        "glv_gd steps=1e9": (
            lambda: (fig3(),),
            lambda d: nqf.glv_gd(d, z5, lr=1e-3, steps=10**9),
        ),
        # flow solves: saved times, members, copies of A
        "solve_flow ts=1e8 points": (
            lambda: (fig3(), np.linspace(0.0, 1.0, 10**8)),
            lambda d, ts: nqf.solve_flow(d, M0=I5, t1=1.0, saveat=nqf.Save(ts=ts)),
        ),
        "solve_flow DenseData m=400 p=300 (copies of A)": (
            lambda: (dense(400, 300),),
            lambda d: nqf.solve_flow(d, W0=1e-2 * np.eye(300)[:, :2], t1=1.0, memory_budget=5e8),  # W0: no PSD check
        ),
        "solve_sweep 1e6 members": (
            lambda: (fig3(), np.logspace(-6, -2, 10**6)),
            lambda d, eps: nqf.solve_sweep(d, eps=eps, z0=z5, t1=1.0, saveat=nqf.Save(ts=np.linspace(0, 1, 1000))),
        ),
        "solve_modified_flow ts=1e8 points": (
            lambda: (fig3(), np.linspace(0.0, 1.0, 10**8)),
            lambda d, ts: nqf.solve_modified_flow(d, M0=I5, lr=1e-3, t1=1.0, ts=ts),
        ),
        "theorem6 ts=1e8 points": (
            lambda: (fig3(), np.linspace(0.0, 1.0, 10**8)),
            lambda d, ts: nqf.theorem6(d, ts, M0=I5),
        ),
        # network: saved states of record / predict
        "record steps=1e9": (
            mlp,
            lambda net, x, y: nqf.record(net, x, y, nqf.SGD(0.01, steps=10**9), save_every=1),
        ),
        "predict steps=1e9": (
            mlp,
            lambda net, x, y: nqf.predict(net, x, y, nqf.SGD(0.01, steps=10**9), save_every=1),
        ),
    }


def main(argv: list[str]) -> None:
    limit = int(float(argv[0]))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import nqf.network
    import nqf.solvers
    import nqf.theory  # noqa: F401 (nqf imports its layers lazily: not part of the timed call)

    cases = _cases()
    for name in argv[1:] or list(cases):
        inputs, call = cases[name]
        args = inputs()
        start = time.perf_counter()
        row = {"case": name, "error": None, "message": "", "nbytes": None, "budget": None}
        try:
            call(*args)
        except BaseException as e:  # noqa: BLE001 (reported to the parent, which judges it)
            row.update(error=type(e).__name__, message=str(e)[:600])
            row.update(nbytes=getattr(e, "nbytes", None), budget=getattr(e, "budget", None))
        row["seconds"] = time.perf_counter() - start
        del args
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
