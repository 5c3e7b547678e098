"""The ``nqf`` command line: reproduce the paper's figures and validate the solver.

    nqf list                                   list the reproducible figures
    nqf reproduce NAME [--out DIR] [--quick]   write DIR/NAME.png and DIR/NAME.json
    nqf validate [--json FILE] [--eps ...]     flow vs the exact solutions (Theorems 6, 7, 16, Prop. 7)
    nqf compress DATA [--d-prime N] [...]      k_V, d' and the Corollary 3 bound (Theorem 3)

Exit status: 0 if every check passed, 1 if any check failed, 2 for a usage error (e.g. an
unknown figure name).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

__all__ = ["main", "build_parser"]

_DESCRIPTION = """\
Training dynamics of Neural Quadratic Forms (Ziyin, Xu, Poggio, Chuang, arXiv 2608.13335).
Reproduce the paper's figures with their measured-vs-predicted checks, or validate the flow
solver against the paper's exact solutions. Every check is a record {name, value, bound, passed};
the exit status is 1 if any check fails."""


def _experiments():
    from .experiments import EXPERIMENTS, TITLES

    return EXPERIMENTS, TITLES


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``nqf`` (subcommands ``list``, ``reproduce``, ``validate``)."""
    parser = argparse.ArgumentParser(
        prog="nqf", description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'nqf COMMAND --help' for the options of a command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    lst = sub.add_parser(
        "list", help="list the reproducible figures",
        description="List the figures that 'nqf reproduce NAME' can reproduce, with a one-line "
                    "description of each.",
    )

    rep = sub.add_parser(
        "reproduce", help="reproduce a paper figure (PNG + JSON with checks)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run the experiment behind a figure of the paper, write OUT/NAME.png and\n"
            "OUT/NAME.json, and print its checks (measured vs predicted, with bounds) and\n"
            "key numbers. Exit status 1 if any check fails, 2 for an unknown NAME.\n\n"
            "Figures:\n"
            "  fig3           Fig. 3 left/middle: m = p = 5, eps = 1e-5; flow vs Theorem 6 (max\n"
            "                 relative error <= 1e-8, also at eps = 1e-12), ignition times vs E19\n"
            "                 (within 0.1%), GD at lr 0.01 as markers.\n"
            "  fig3-powerlaw  Fig. 3 right: m = p = 1000 power-law spectrum; slope of the excess\n"
            "                 loss in log-log vs the predicted -1.25 and its finite-eps form.\n"
            "                 (~1 min on a laptop CPU; --quick uses p = 300.)\n"
            "  fig4           Fig. 4: sample-wise plateaus, flow vs Theorem 5, t*_mu vs prediction.\n"
            "  fig4-powerlaw  sample-wise power law (Theorem 10, E23).\n"
            "  fig5           Fig. 5: Fourier-MLP power law vs its NQF, raw-input MLP baseline.\n"
            "  fig2           Fig. 2: MLP, CNN, attention, MHA vs their NQFs (GD, momentum, Adam).\n"
            "  fig8           Fig. 8: deep MLP / attention vs 2-layer and 1-layer NQFs."
        ),
    )
    lst.set_defaults(handler=_cmd_list, subparser=lst)
    rep.set_defaults(handler=_cmd_reproduce, subparser=rep)
    rep.add_argument("name", metavar="NAME", help="figure to reproduce (see 'nqf list')")
    rep.add_argument("--out", metavar="DIR", default="nqf-out",
                     help="output directory, created if missing (default: ./nqf-out)")
    rep.add_argument("--quick", action="store_true",
                     help="reduced work (coarser grids, smaller problems); every check still runs")

    val = sub.add_parser(
        "validate", help="check the flow solver against the exact solutions",
        description=(
            "Run every theorem check of the package: the flow on data satisfying Theorems 6, 7, "
            "16 and Proposition 7 at each initial scale eps against the exact solutions (max "
            "relative error over the whole trajectory <= 1e-8); each oracle refusing data that "
            "violates its assumption; the NTK of Eq. E25 against autodiff (<= 1e-12); the (M, mu) "
            "flow of Eq. E10 against weight space; and the checks later modules register. Prints a "
            "table name/value/bound/passed; exit status 1 if any check fails."
        ),
    )
    val.set_defaults(handler=_cmd_validate, subparser=val)
    val.add_argument("--json", metavar="FILE", help='also write {"checks": [...]} to FILE')
    val.add_argument("--eps", metavar="EPS", type=float, nargs="+", default=None,
                     help="initial scales to test (default: 1e-3 1e-6 1e-12)")
    _add_compress_parser(sub)
    return parser


def _fmt_value(v) -> str:
    if v is None:
        return "nan"
    if isinstance(v, bool):
        return str(v)
    try:
        return f"{float(v):.3g}"
    except (TypeError, ValueError):
        return str(v)


def format_checks(checks) -> str:
    """A plain-text table of check records (name, value, bound, passed)."""
    rows = [(c["name"], _fmt_value(c["value"]), _fmt_value(c["bound"]), "PASS" if c["passed"] else "FAIL")
            for c in checks]
    head = ("check", "value", "bound", "result")
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i]) for i in range(4)]
    line = lambda r: "  ".join(  # noqa: E731
        (r[i].ljust(widths[i]) if i == 0 else r[i].rjust(widths[i])) for i in range(4)
    )
    out = [line(head), line(tuple("-" * w for w in widths))]
    out += [line(r) for r in rows]
    n_fail = sum(not c["passed"] for c in checks)
    out.append(f"{len(checks) - n_fail}/{len(checks)} checks passed" + (f", {n_fail} FAILED" if n_fail else ""))
    return "\n".join(out)


def _key_numbers(result: dict) -> list[str]:
    """A few headline numbers of an experiment's JSON, for the terminal."""
    lines = []
    g = result.get
    if "max_rel_error_vs_oracle" in result:
        lines.append(f"max rel error flow vs Theorem 6 (eps=1e-5): {g('max_rel_error_vs_oracle'):.3g}")
    small = g("eps_1e-12")
    if isinstance(small, dict):
        lines.append(f"max rel error flow vs Theorem 6 (eps=1e-12): {small['max_rel_error_vs_oracle']:.3g}")
    ign = g("ignition_times")
    if isinstance(ign, dict):
        pred = ", ".join(f"{t:.2f}" for t in ign["predicted"])
        lines.append(f"ignition times t*_k predicted: {pred}")
        lines.append(f"ignition times max rel error: {max(ign['rel_error']):.3g}")
    if "gd_vs_flow_max_rel_deviation" in result:
        lines.append(f"GD (lr 0.01) vs flow, max rel deviation: {g('gd_vs_flow_max_rel_deviation'):.3g}")
    slope = g("slope")
    if isinstance(slope, dict):
        lines.append(
            f"slope measured {slope['measured']:.4f} | predicted {slope['predicted']:.4f} | "
            f"finite-eps {slope['finite_eps_predicted']:.4f} | finite-eps,p {slope['finite_size_predicted']:.4f}"
        )
        w = g("fit_window", {})
        lines.append(f"fit window: t in [{w['t_min']:.4g}, {w['t_max']:.4g}] (modes k = {w['k_lo']}..{w['k_hi']})")
    stats = g("solver_stats")
    if isinstance(stats, dict):
        lines.append(f"solver steps: {stats['num_steps']} ({stats['num_rejected_steps']} rejected)")
    wall = g("wall_time_s")
    if isinstance(wall, dict) and "total" in wall:
        lines.append(f"wall time: {wall['total']:.1f} s")
    return lines


def _cmd_list(args, parser) -> int:
    experiments, titles = _experiments()
    width = max(len(n) for n in experiments)
    for name in experiments:
        print(f"{name.ljust(width)}  {titles.get(name, '')}")
    return 0


def _cmd_reproduce(args, parser) -> int:
    experiments, _ = _experiments()
    if args.name not in experiments:
        parser.error(f"unknown figure {args.name!r}; valid names: {', '.join(experiments)} "
                     "(see 'nqf list').")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out: {args.out!r} exists and is not a directory.")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as err:
        parser.error(f"--out: cannot create output directory {args.out!r}: {err.strerror}.")
    print(f"nqf reproduce {args.name}{' --quick' if args.quick else ''} -> {args.out}", flush=True)
    t0 = time.perf_counter()
    result = experiments[args.name](args.out, quick=args.quick)
    for line in _key_numbers(result):
        print(line)
    print(format_checks(result["checks"]))
    print(f"wrote {result.get('png')} and {result.get('json')} ({time.perf_counter() - t0:.1f} s)")
    return 0 if all(c["passed"] for c in result["checks"]) else 1


def _cmd_validate(args, parser) -> int:
    from .experiments._common import jsonable
    from .validate import validate

    kwargs = {} if args.eps is None else {"eps_values": tuple(args.eps)}
    try:
        checks = validate(**kwargs)
    except ValueError as err:
        parser.error(f"--eps: {err}")
    print(format_checks(checks))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(jsonable({"checks": checks}), fh, indent=2, allow_nan=False)
            fh.write("\n")
        print(f"wrote {args.json}")
    return 0 if all(c["passed"] for c in checks) else 1


_COMPRESS_DATASETS = ("mlp", "phase-retrieval", "matrix-completion")


def _add_compress_parser(sub) -> None:
    """The ``nqf compress`` subcommand (Theorem 3 / Corollary 3, `nqf.compress.compression_report`)."""
    cmp = sub.add_parser(
        "compress", help="k_V, the compressed width d' and the Corollary 3 bound for a model",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Compress a width-d NQF (Theorem 3: d' = k_V + 1, exact; Corollary 3: smaller d',\n"
            "with the error bound E24), train the original and the compressed model with the\n"
            "same minibatches, and report k_V, d', the measured error and (Corollary 3) the bound\n"
            "and its tightness. DATA is a built-in generated set (mlp, phase-retrieval,\n"
            "matrix-completion) or an .npz file with A (m, p, p) | U (m, p, r) and s (m, r) |\n"
            "Lambda (m, p) [and P], y (m,), optional g (m, p), B (m, p, p), f0 (m,), W0 (p, d).\n"
            "Library call: nqf.compress.compression_report(model, W0=..., lr=..., steps=...)."
        ),
    )
    cmp.set_defaults(handler=_cmd_compress, subparser=cmp)
    cmp.add_argument("data", metavar="DATA", help=f"one of {', '.join(_COMPRESS_DATASETS)} or a .npz path")
    cmp.add_argument("--d", type=int, default=500, help="original width when W0 is not given (default 500)")
    cmp.add_argument("--d-prime", type=int, default=None,
                     help="compressed width (default k_V + 1; below that: Corollary 3)")
    cmp.add_argument("--lr", type=float, default=0.02, help="learning rate of the original (default 0.02)")
    cmp.add_argument("--steps", type=int, default=1000, help="SGD steps (default 1000)")
    cmp.add_argument("--batch-size", type=int, default=32, help="minibatch size (default 32; 0: full batch)")
    cmp.add_argument("--init-scale", type=float, default=0.3,
                     help="W0 = scale * N(0, 1) / sqrt(d) when W0 is not given (default 0.3)")
    cmp.add_argument("--seed", type=int, default=0, help="seed of W0 and the minibatches (default 0)")
    cmp.add_argument("--rtol", type=float, default=None, help="rank tolerance of k_V (default 1e-10)")
    cmp.add_argument("--json", metavar="FILE", help="also write the report to FILE")


def _load_compress_model(name: str):
    import numpy as np

    from . import datasets
    from .data import CommutingData, DenseData, LowRankData
    from .model import NQFModel

    if name == "mlp":
        return NQFModel(datasets.mlp_data(200, 39, rank=31)), None
    if name == "phase-retrieval":
        return NQFModel(datasets.phase_retrieval_data(200, 40, rank=30)), None
    if name == "matrix-completion":
        return NQFModel(datasets.matrix_completion_data(24, 16, 200, active_rows=20, active_cols=12)), None
    if not name.endswith(".npz"):
        raise ValueError(f"DATA must be one of {', '.join(_COMPRESS_DATASETS)} or an .npz file; found {name!r}.")
    with np.load(name) as f:
        z = {k: f[k] for k in f.files}
    if "y" not in z:
        raise ValueError(f"{name}: missing array 'y' (labels, shape (m,)); found {sorted(z)}.")
    if "A" in z:
        data = DenseData(z["A"], z["y"])
    elif "U" in z and "s" in z:
        data = LowRankData(z["U"], z["s"], z["y"])
    elif "Lambda" in z:
        data = CommutingData(z["Lambda"], z["y"], z.get("P"))
    else:
        raise ValueError(f"{name}: need 'A', or 'U' and 's', or 'Lambda'; found {sorted(z)}.")
    return NQFModel(data, g=z.get("g"), B=z.get("B"), f0=z.get("f0")), z.get("W0")


def _cmd_compress(args, parser) -> int:
    import numpy as np

    from .compress import DEFAULT_RTOL, compression_report
    from .experiments._common import jsonable

    try:
        model, W0 = _load_compress_model(args.data)
        if W0 is None:
            rng = np.random.default_rng(args.seed)
            W0 = args.init_scale * rng.standard_normal((model.p, args.d)) / np.sqrt(args.d)
        batch = None if args.batch_size == 0 else args.batch_size
        rep = compression_report(model, lr=args.lr, steps=args.steps, W0=W0, d_prime=args.d_prime,
                                 batch_size=batch, key=args.seed if batch else None,
                                 rtol=DEFAULT_RTOL if args.rtol is None else args.rtol)
    except (ValueError, TypeError, OSError) as err:
        parser.error(str(err))
    print(f"p = {model.p}, m = {model.m}: k_V = {rep['k_V']} (singular-value gap {rep['span_gap']:.3g}), "
          f"d = {rep['d']} -> d' = {rep['d_prime']} ({rep['kind']}), lr {rep['lr']:g} -> {rep['lr_compressed']:g}")
    print(f"{rep['steps']} SGD steps: max rel output error {rep['max_output_rel_error']:.3g}, "
          f"max order-parameter error {rep['error']:.3g}")
    if rep["kind"] == "corollary3":
        t = rep["tightness"]
        print(f"E24: tail {rep['tail']:.3g}, L {rep['L']:.3g}, bound at the end {rep['bound_final']:.3g}; "
              f"holds at every step: {rep['holds']}; bound/measured min {t['min']:.3g}, "
              f"median {t['median']:.3g}, final {t['final']:.3g}")
        s = rep["tightness_sharpened"]
        print(f"sharpened e0 prod(1 + lr L_k): holds {rep['holds_sharpened']}, bound/measured "
              f"final {s['final']:.3g}")
    if args.json:
        import json

        rep = dict(rep, span_singular_values=np.asarray(rep["span_singular_values"]))
        with open(args.json, "w") as fh:
            json.dump(jsonable(rep), fh, indent=2, allow_nan=False)
            fh.write("\n")
        print(f"wrote {args.json}")
    ok = rep["max_output_rel_error"] <= 1e-10 if rep["kind"] == "theorem3" else rep["holds"]
    return 0 if ok else 1


def main(argv=None) -> int:
    """Entry point of the ``nqf`` console script; returns the exit status.

    **Arguments:** `argv`, the arguments without the program name (default ``sys.argv[1:]``).
    Usage errors (unknown figure name, bad option) print a message and raise `SystemExit(2)`.
    """
    args = build_parser().parse_args(argv)
    return args.handler(args, args.subparser)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
