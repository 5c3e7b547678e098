"""asv benchmarks: nqf against the strongest hand-written peers, each calibrated to the same
accuracy target (problems, references and targets in `_peers.py`).

Every class measures in one `setup_cache` process: calibration (the loosest rtol of
`_peers.RTOL_GRID` meeting the target, per contender), then the best of several interleaved
calls. `track_speedup(peer)` is peer time / nqf time (> 1: nqf is faster); `track_seconds`
and `track_rtol` give the raw numbers. Problem sizes via the environment:
``NQF_BENCH_PEERS_P`` (power law p, default "1e3,1e4,1e5"; the issue's 1e6 takes minutes per
contender), ``NQF_BENCH_COUPLED_P`` (coupled commuting data, default "1e4"; 1e5 and 1e6 opt-in),
``NQF_BENCH_SGD_D`` (widths, default "1e2,1e3,1e4").

Without asv: ``python benchmarks/bench_peers.py [fig3 overhead mlp powerlaw coupled sgd]`` prints the
same measurements as tables (docs/performance.md quotes them).
"""

import sys

import numpy as np

try:
    from ._peers import MLP, SGD, Coupled, Fig3, Powerlaw, calibrate, env_list, interleaved_best
except ImportError:  # run as a script: python benchmarks/bench_peers.py
    from _peers import MLP, SGD, Coupled, Fig3, Powerlaw, calibrate, env_list, interleaved_best

POWERLAW_P = [int(p) for p in env_list("NQF_BENCH_PEERS_P", "1e3,1e4,1e5")]
COUPLED_P = [int(p) for p in env_list("NQF_BENCH_COUPLED_P", "1e4")]
SGD_D = [int(d) for d in env_list("NQF_BENCH_SGD_D", "1e2,1e3,1e4")]


def measure(problem, repeat: int, exact: dict | None = None, target=None, contenders=None) -> dict:
    """Calibrate every contender of `problem` (or `contenders`) to `target` (default: the
    problem's), then time them interleaved (best of `repeat`). Returns {name: {"rtol", "error",
    "seconds"}} (rtol None for a closed form or a contender that never met the target; then
    "seconds" is None too)."""
    out, fns = {}, {}
    target = problem.target if target is None else target
    for name, run in (problem.contenders() if contenders is None else contenders).items():
        rtol, err = calibrate(run, problem.error, target)
        out[name] = {"rtol": rtol, "error": err, "seconds": None}
        if rtol is not None:
            fns[name] = lambda run=run, rtol=rtol: run(rtol)
            fns[name]()  # compiled / warmed at this tolerance
    for name, fn in (exact or {}).items():
        out[name] = {"rtol": None, "error": float(problem.error(fn())), "seconds": None}
        fns[name] = fn
    best, _ = interleaved_best(fns, repeat)
    for name, t in best.items():
        out[name]["seconds"] = t
    return out


def _speedup(cache, peer, nqf_name):
    t_peer, t_nqf = cache[peer]["seconds"], cache[nqf_name]["seconds"]
    return float("nan") if t_peer is None or t_nqf is None else t_peer / t_nqf


class Fig3Peers:
    """Fig. 3 (m = p = 5), error 1e-8 vs Theorem 6: nqf's default solve against hand-written
    diffrax (structured GLV and dense M-flow) and scipy DOP853."""

    timeout = 1800
    params = [["diffrax GLV (hand)", "diffrax M-flow (hand)", "scipy DOP853 GLV"]]
    param_names = ["peer"]

    def setup_cache(self):
        prob = Fig3()
        return measure(prob, 30, {"nqf exact": prob.exact()})

    def track_speedup(self, cache, peer):
        return _speedup(cache, peer, "nqf")

    track_speedup.unit = "ratio"

    def track_nqf_ms(self, cache, peer):
        return 1e3 * cache["nqf"]["seconds"]

    track_nqf_ms.unit = "ms"


OVERHEAD_TARGETS = [1e-8, 1e-4]
OVERHEAD_PAIRS = {"glv": ("nqf", "diffrax GLV (hand)"), "M": ("nqf form=M", "diffrax M-flow (hand)")}


class Fig3Overhead:
    """The fixed cost of a warm `solve_flow` call (issue 34): Fig. 3 at error 1e-8 and 1e-4 vs
    Theorem 6, nqf's default solve (GLV form) against the hand-written diffrax Tsit5 GLV log-form
    solve, and ``form="M"`` against the hand-written dense M-flow, each contender calibrated to
    the target (same rtol, same steps), best of 300 interleaved warm calls that return z on the
    host. `track_slowdown` is nqf time / hand time (the issue's goal: <= 1.2)."""

    timeout = 1800
    params = [OVERHEAD_TARGETS, list(OVERHEAD_PAIRS)]
    param_names = ["target", "form"]

    def setup_cache(self):
        prob = Fig3()
        return {t: measure(prob, 300, target=t, contenders=prob.overhead_contenders()) for t in OVERHEAD_TARGETS}

    def track_slowdown(self, cache, target, form):
        nqf_name, hand = OVERHEAD_PAIRS[form]
        return 1.0 / _speedup(cache[target], hand, nqf_name)

    track_slowdown.unit = "ratio"

    def track_nqf_ms(self, cache, target, form):
        return 1e3 * cache[target][OVERHEAD_PAIRS[form][0]]["seconds"]

    track_nqf_ms.unit = "ms"

    def track_hand_ms(self, cache, target, form):
        return 1e3 * cache[target][OVERHEAD_PAIRS[form][1]]["seconds"]

    track_hand_ms.unit = "ms"


class MLPPeers:
    """Two-layer MLP data (p = 129, m = 2000), error 1e-6: nqf's factor form (FeedForwardData)
    against the hand-written diffrax W-flow and scipy LSODA / DOP853 on the same W-flow."""

    timeout = 1800
    params = [["diffrax W-flow (hand)", "scipy LSODA W-flow", "scipy DOP853 W-flow"]]
    param_names = ["peer"]

    def setup_cache(self):
        return measure(MLP(), 7)

    def track_speedup(self, cache, peer):
        return _speedup(cache, peer, "nqf")

    track_speedup.unit = "ratio"


class PowerlawPeers:
    """DiagonalData power law to t1 = 1e5, excess-loss error 1e-5: nqf's stiff path (Rodas5P,
    diagonal solve) and exact path against scipy LSODA (banded Jacobian), scipy BDF (sparse),
    SUNDIALS CVODE (diagonal Jacobian, sparse solve) and the plain numpy closed form."""

    timeout = 7200
    params = [
        POWERLAW_P,
        ["scipy LSODA banded", "scipy BDF sparse", "CVODE BDF (diagonal Jacobian)", "numpy closed form"],
    ]
    param_names = ["p", "peer"]

    def setup_cache(self):
        out = {}
        for p in POWERLAW_P:
            prob = Powerlaw(p)
            out[p] = measure(prob, 3 if p <= 10**4 else 1, prob.exact_contenders())
        return out

    def track_speedup_stiff(self, cache, p, peer):
        """peer time / nqf stiff (Rodas5P) time."""
        return _speedup(cache[p], peer, "nqf stiff (Rodas5P)") if peer in cache[p] else float("nan")

    track_speedup_stiff.unit = "ratio"

    def track_speedup_exact(self, cache, p, peer):
        """peer time / nqf exact (closed-form path) time."""
        return _speedup(cache[p], peer, "nqf exact") if peer in cache[p] else float("nan")

    track_speedup_exact.unit = "ratio"


class CoupledPeers:
    """General commuting data (m = 100, p = NQF_BENCH_COUPLED_P), excess-loss error 1e-5: nqf's
    reduced GLV paths (LSODA or CVODE with a dense m x m solve on the host; Rodas5P in JAX)
    against SUNDIALS CVODE-GMRES (matrix-free, analytic Jacobian-vector products) on the
    p-dimensional system."""

    timeout = 7200
    params = [COUPLED_P, ["CVODE BDF GMRES", "nqf stiff (Rodas5P, reduced)"]]
    param_names = ["p", "peer"]

    def setup_cache(self):
        return {p: measure(Coupled(p), 3 if p <= 10**4 else 1) for p in COUPLED_P}

    def track_speedup(self, cache, p, peer):
        """peer time / the faster nqf host path's time (lsoda or cvode, reduced)."""
        host = ("nqf lsoda (reduced)", "nqf cvode (reduced)")
        fastest = min(host, key=lambda n: cache[p][n]["seconds"] if cache[p][n]["seconds"] else float("inf"))
        return _speedup(cache[p], peer, fastest)

    track_speedup.unit = "ratio"


class SGDPeers:
    """The closed SGD map (p = 65, m = 600, 200 full-batch steps) against the hand-written
    numpy W-space loop with the MLP gradient, at widths d."""

    timeout = 1800
    params = [SGD_D]
    param_names = ["d"]

    def setup_cache(self):
        out = {}
        for d in SGD_D:
            prob = SGD(d)
            best, res = interleaved_best({"closed": prob.closed, "wspace": prob.wspace}, 7)
            diff = float(np.abs(res["closed"] - res["wspace"]).max() / np.abs(res["wspace"]).max())
            out[d] = {"closed": best["closed"], "wspace": best["wspace"], "diff": diff}
        return out

    def track_speedup(self, cache, d):
        """W-space time / closed-map time (> 1: the exact map is faster)."""
        return cache[d]["wspace"] / cache[d]["closed"]

    track_speedup.unit = "ratio"

    def track_rel_diff(self, cache, d):
        if not cache[d]["diff"] <= 1e-10:
            raise AssertionError(f"closed map and W-space disagree at d={d}: {cache[d]['diff']:.3g}")
        return cache[d]["diff"]

    track_rel_diff.unit = "relative"


def _table(title, res):
    print(f"\n## {title}\n\n| contender | rtol | error | time |\n|---|---|---|---|")
    for name, r in res.items():
        rt = (
            "closed form"
            if r["rtol"] is None and r["seconds"] is not None
            else (f"{r['rtol']:.2g}" if r["rtol"] is not None else "target not met")
        )
        t = (
            "-"
            if r["seconds"] is None
            else (f"{r['seconds'] * 1e3:.3g} ms" if r["seconds"] < 1 else f"{r['seconds']:.3g} s")
        )
        print(f"| {name} | {rt} | {r['error']:.2g} | {t} |")


if __name__ == "__main__":
    import pathlib

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    which = sys.argv[1:] or ["fig3", "overhead", "mlp", "powerlaw", "coupled", "sgd"]
    if "fig3" in which:
        prob = Fig3()
        _table("fig3 (target 1e-8)", measure(prob, 30, {"nqf exact": prob.exact()}))
    if "overhead" in which:
        prob = Fig3()
        for t in OVERHEAD_TARGETS:
            res = measure(prob, 300, target=t, contenders=prob.overhead_contenders())
            _table(f"fig3 fixed cost of a call (target {t:g})", res)
            for form, (a, b) in OVERHEAD_PAIRS.items():
                print(f"\nform {form}: nqf / hand = {res[a]['seconds'] / res[b]['seconds']:.3f}")
    if "mlp" in which:
        _table("mlp (target 1e-6)", measure(MLP(), 7))
    if "powerlaw" in which:
        for p in POWERLAW_P:
            prob = Powerlaw(p)
            _table(f"powerlaw p = {p:g} (target 1e-5)", measure(prob, 3 if p <= 10**4 else 1, prob.exact_contenders()))
    if "coupled" in which:
        for p in COUPLED_P:
            _table(f"coupled p = {p:g}, m = 100 (target 1e-5)", measure(Coupled(p), 3 if p <= 10**4 else 1))
    if "sgd" in which:
        print(
            "\n## closed SGD map vs W-space (200 steps)\n\n| d | closed | W-space | ratio | rel diff |\n|---|---|---|---|---|"
        )
        for d in SGD_D:
            prob = SGD(d)
            best, res = interleaved_best({"closed": prob.closed, "wspace": prob.wspace}, 7)
            diff = np.abs(res["closed"] - res["wspace"]).max() / np.abs(res["wspace"]).max()
            print(
                f"| {d:g} | {best['closed'] * 1e3:.3g} ms | {best['wspace'] * 1e3:.3g} ms | "
                f"{best['wspace'] / best['closed']:.3g} | {diff:.2g} |"
            )
