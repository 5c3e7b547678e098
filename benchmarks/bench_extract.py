"""asv benchmarks: `nqf.extract` at real sizes (issue 23, item 6), feed-forward result against the
dense one on all 1797 scikit-learn 8x8 digits.

Problems (inputs x = image / 16, m = 1797, one output):

- ``cnn``: an equinox ``Conv2d(1, 32, kernel 5, no bias)`` -> tanh -> global sum pool ->
  ``Linear(32, 1, no bias)``, made into f(W, x) with `nqf.data.module_fn` (neuron = one kernel
  (25) and its readout weight (1): p = 26, ``groups=(25, 1)``). Its A(x) is the CNN form of
  Proposition 16, C(x) = the 4 x 4 patch sum (25, 1);
- ``mlp``: a 64 -> hidden tanh MLP without biases, neuron [u (64); v (1)], p = 65,
  ``groups=(64, 1)`` (the hidden width does not enter: extract works with two neurons).

``structure="auto"`` returns `FeedForwardData` (C as factors a = C, b = 1); ``"dense"`` builds the
(m, p, p) matrices A_H and B. `time_extract` is a compiled call (setup extracts once);
`peakmem_extract` is asv's peak RSS of the benchmark process; `track_peak_rss_growth_mb` and
`track_first_call_s` run a fresh subprocess per case (first call: trace + compile + extract) and
record the growth of the peak RSS over the RSS after importing and loading the data.

Measured (2 shared CPU cores, `python benchmarks/bench_extract.py`, each case in a fresh process;
growth = peak RSS minus the RSS after importing JAX/nqf and loading the digits, ~400-450 MB):

| case | returned | chunk | first call | compiled call | peak RSS growth |
|---|---|---|---|---|---|
| cnn auto | FeedForwardData, split (0, 25, 1, 0) | 168 | 3.1 s | 0.55 s | +113 MB |
| cnn dense | DenseData (1797, 26, 26) | 64 | 3.9 s | 2.0 s | +135 MB |
| cnn, nqf before issue 23 (2ecb911) | fails: XLA asks for 43 GB | all | | | |
| mlp auto | FeedForwardData, split (0, 64, 1, 0) | 256 | 1.5 s | 0.07 s | +60 MB |
| mlp dense | DenseData (1797, 65, 65) | 24 | 2.0 s | 0.44 s | +431 MB |
| mlp, nqf before issue 23 (2ecb911) | DenseData | all | 3.3 s | 1.3 s | +686 MB |

(The machine's load average was about 3 on its 2 cores during these runs: times are +-30%.)
The old extractor vmapped the dense Hessian over all inputs at once; for the CNN (a convolution
whose kernels are batched by the vmap) XLA's workspace grows with the square of the number of
inputs: +0.55 GB at m = 200, +2.1 GB at 400, +8.2 GB at 800, 43 GB requested at 1797. The
chunks here are chosen by measuring the compiled program (`nqf.data._extract_blocks`).

Run: `asv run -E existing --quick --bench bench_extract`, or `python benchmarks/bench_extract.py`
for the table (each case in a fresh process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CASES = ["cnn", "mlp"]
STRUCTURES = ["auto", "dense"]


def _digits():
    import numpy as np
    from sklearn.datasets import load_digits

    return np.asarray(load_digits().images, dtype=np.float64) / 16.0  # (1797, 8, 8)


def problem(case: str):
    """(f, x, kwargs of extract) for the case: f(W, x), inputs (1797, ...), p and groups."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import nqf

    images = _digits()
    if case == "cnn":

        class DigitsCNN(eqx.Module):
            conv: eqx.nn.Conv2d
            readout: eqx.nn.Linear

            def __init__(self, key):
                k1, k2 = jax.random.split(key)
                self.conv = eqx.nn.Conv2d(1, 32, 5, use_bias=False, key=k1)
                self.readout = eqx.nn.Linear(32, 1, use_bias=False, key=k2)

            def __call__(self, x):
                h = jnp.sum(jnp.tanh(self.conv(x)), axis=(1, 2))  # global sum pool, (32,)
                return self.readout(h)[0]

        f, p = nqf.data.module_fn(
            DigitsCNN(jax.random.PRNGKey(0)), [(lambda c: c.conv.weight, 0), (lambda c: c.readout.weight, 1)]
        )
        return f, images[:, None, :, :], {"p": p, "groups": (25, 1)}
    if case == "mlp":

        def f(W, x):
            return W[64] @ jnp.tanh(W[:64].T @ x)

        return f, images.reshape(-1, 64), {"p": 65, "groups": (64, 1)}
    raise ValueError(f"unknown case {case!r}; expected one of {CASES}.")


class ExtractDigits:
    """`nqf.extract` on all 1797 digits, feed-forward ("auto") vs dense, compiled."""

    params = [CASES, STRUCTURES]
    param_names = ["case", "structure"]
    timeout = 900

    def setup(self, case, structure):
        import nqf

        self.f, self.x, self.kw = problem(case)
        self.nqf = nqf
        nqf.extract(self.f, self.x, structure=structure, **self.kw)

    def time_extract(self, case, structure):
        self.nqf.extract(self.f, self.x, structure=structure, **self.kw)

    def peakmem_extract(self, case, structure):
        self.nqf.extract(self.f, self.x, structure=structure, **self.kw)


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(case: str, structure: str) -> dict:
    """One fresh-process measurement: RSS after imports and data, first and second call times,
    peak RSS (ru_maxrss) at the end, what was returned."""
    import resource

    import nqf

    f, x, kw = problem(case)
    base = _rss_mb()
    t0 = time.perf_counter()
    rep, report = nqf.extract_report(f, x, structure=structure, **kw)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    nqf.extract_report(f, x, structure=structure, **kw)
    second = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    data = rep.data if isinstance(rep, nqf.NQFModel) else rep
    return {
        "case": case,
        "structure": structure,
        "returned": type(data).__name__,
        "split": report.split,
        "chunk": report.chunk_size,
        "first_s": first,
        "second_s": second,
        "rss_base_mb": base,
        "peak_mb": peak,
        "growth_mb": peak - base,
    }


def measure(case: str, structure: str) -> dict:
    """`child` in a fresh Python process (so the peak RSS is this extraction's alone)."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        f"import sys, json; sys.path.insert(0, {here!r}); import bench_extract as b; "
        f"print(json.dumps(b.child({case!r}, {structure!r})))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


class ExtractDigitsFresh:
    """Fresh-process measurements (first call = trace + compile + extract; peak RSS growth)."""

    params = [CASES, STRUCTURES]
    param_names = ["case", "structure"]
    timeout = 900

    def setup_cache(self):
        return {f"{c}-{s}": measure(c, s) for c in CASES for s in STRUCTURES}

    setup_cache.timeout = 1800

    def track_peak_rss_growth_mb(self, cache, case, structure):
        """Peak RSS minus the RSS after imports and data (MB); the issue's goal: under 2 GB."""
        return cache[f"{case}-{structure}"]["growth_mb"]

    track_peak_rss_growth_mb.unit = "MB"

    def track_first_call_s(self, cache, case, structure):
        return cache[f"{case}-{structure}"]["first_s"]

    track_first_call_s.unit = "seconds"


if __name__ == "__main__":
    print("| case | structure | returned | split | chunk | first call | compiled call | peak RSS | growth |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in CASES:
        for s in STRUCTURES:
            r = measure(c, s)
            print(
                f"| {c} | {s} | {r['returned']} | {r['split']} | {r['chunk']} | {r['first_s']:.2f} s | "
                f"{r['second_s']:.2f} s | {r['peak_mb']:.0f} MB | +{r['growth_mb']:.0f} MB |",
                flush=True,
            )
