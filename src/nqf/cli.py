"""The ``nqf`` command line: reproduce the paper's figures and validate the solver.

    nqf list                                   list the reproducible figures
    nqf reproduce NAME [--out DIR] [--quick] [--strict-claims]
                                               write DIR/NAME.png and DIR/NAME.json
    nqf validate [--json FILE] [--eps ...]     flow vs the exact solutions (Theorems 6, 7, 16, Prop. 7)
    nqf compress DATA [--d-prime N] [...]      k_V, d' and the Corollary 3 bound (Theorem 3)
    nqf info [--json]                          versions, JAX devices, float64, compilation cache

`reproduce` and `validate` print a progress line to stderr: on by default when stderr is a
terminal, off with ``--no-progress`` or the environment variable ``NQF_PROGRESS=0``, forced on
with ``--progress`` (or ``NQF_PROGRESS=1``). An experiment ``run(out_dir, quick=False,
progress=None)`` that accepts a `progress` callable reports its stages through it
(``progress(stage, info=None)``); the CLI prints one line per stage.

Exit status: 0 if every check passed, 1 if any check failed, 2 for a usage error (e.g. an
unknown figure name). For ``reproduce`` the checks are the package's own correctness; the
paper's claims that a figure tests are reported (a claims table after the checks, ``claims`` in
the JSON) and change the exit status only with ``--strict-claims`` (1 if a claim is "not
reproduced").
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import textwrap
import time

__all__ = ["main", "build_parser", "info", "progress_enabled"]

_DESCRIPTION = """\
Training dynamics of Neural Quadratic Forms (Ziyin, Xu, Poggio, Chuang, arXiv 2608.13335).
Reproduce the paper's figures with their package checks and the verdicts on the paper's claims,
or validate the flow solver against the paper's exact solutions. Every check is a record {name,
value, bound, passed}; the exit status is 1 if any check fails (claims count only with
'reproduce --strict-claims')."""


def _experiments():
    from .experiments import EXPERIMENTS, TITLES

    return EXPERIMENTS, TITLES


class _Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose description may be computed when help is shown
    (`lazy_description`): ``nqf reproduce --help`` lists the figures of the registry without
    importing the experiments for every other command."""

    lazy_description = None

    def format_help(self):
        if self.lazy_description is not None:
            self.description, self.lazy_description = self.lazy_description(), None
        return super().format_help()


_REPRODUCE_HEAD = """\
Run the experiment behind a figure of the paper, write OUT/NAME.png and OUT/NAME.json, and
print its key numbers, its checks and its claims. Checks are the package's own correctness
(flow vs oracle, closed map vs W-space, module vs NQF at init, ...), with bounds; claims are the
paper's statements the figure tests, each with its metric, value, criterion and a verdict
(reproduced / not reproduced / not expected at this setting). Exit status 1 if any check fails,
2 for an unknown NAME; a claim that is not reproduced is a result, reported in the table and the
JSON, and makes the exit status 1 only with --strict-claims. --quick reduces the work (coarser
grids, smaller problems; seconds to a minute per figure on a laptop CPU) but runs every check
and claim (not the sensitivity rows at the paper's literal settings); the full runs take from
~10-20 s (fig3) to several minutes (fig2, fig5).

A progress line goes to stderr (default: on if stderr is a terminal; --no-progress or
NQF_PROGRESS=0 turns it off, --progress turns it on).

Figures (NAME, from 'nqf list'):
"""


def _reproduce_description() -> str:
    try:
        _, titles = _experiments()
    except Exception as err:  # a broken experiment must not break the help of the others
        return _REPRODUCE_HEAD + f"  (figure list unavailable: {type(err).__name__}: {err})"
    width = max((len(n) for n in titles), default=0)
    lines = []
    for name, title in titles.items():
        wrapped = textwrap.wrap(title, width=max(40, 88 - width)) or [""]
        lines.append(f"  {name.ljust(width)}  {wrapped[0]}")
        lines += [f"  {' ' * width}  {w}" for w in wrapped[1:]]
    return _REPRODUCE_HEAD + "\n".join(lines)


def _add_progress_options(parser) -> None:
    grp = parser.add_mutually_exclusive_group()
    grp.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="print a progress line to stderr (default: only if stderr is a terminal; "
        "env NQF_PROGRESS=0/1 sets the default)",
    )
    grp.add_argument("--no-progress", dest="progress", action="store_false", help="no progress line")


_PROGRESS_OFF = ("0", "false", "no", "off")
_PROGRESS_ON = ("1", "true", "yes", "on")


def progress_enabled(flag: bool | None = None, stream=None) -> bool:
    """Whether the CLI prints progress: `flag` (``--progress`` / ``--no-progress``) if given,
    else the environment variable ``NQF_PROGRESS`` (``0``/``false``/``no``/``off`` or
    ``1``/``true``/``yes``/``on``) if set, else whether `stream` (default stderr) is a terminal.

    **Raises:** `ValueError` naming ``NQF_PROGRESS`` if it is set (and `flag` is None) to any
    other value (the commands turn it into a usage error, exit status 2)."""
    if flag is not None:
        return bool(flag)
    raw = os.environ.get("NQF_PROGRESS", "")
    env = raw.strip().lower()
    if env in _PROGRESS_OFF:
        return False
    if env in _PROGRESS_ON:
        return True
    if env:
        raise ValueError(
            f"the environment variable NQF_PROGRESS={raw!r} is not understood: use one of "
            f"{', '.join(_PROGRESS_OFF)} (off) or {', '.join(_PROGRESS_ON)} (on), or unset it "
            "(on only if stderr is a terminal)."
        )
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _Progress:
    """Progress lines ``[TAG] message (elapsed)`` on stderr; a no-op when disabled. On a terminal
    `status` lines overwrite each other (one live line); elsewhere every line is kept."""

    def __init__(self, tag: str, enabled: bool, stream=None):
        self.tag, self.enabled = tag, enabled
        self.stream = sys.stderr if stream is None else stream
        self.t0 = time.perf_counter()
        try:
            self.tty = bool(self.stream.isatty())
        except (AttributeError, ValueError):
            self.tty = False
        self._live = False

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def _write(self, text: str, live: bool) -> None:
        if not self.enabled:
            return
        if self.tty:
            if live:  # one terminal row, or the carriage return cannot replace it
                import shutil

                cols = shutil.get_terminal_size((100, 24)).columns
                text = text if len(text) < cols else text[: max(cols - 4, 10)] + "..."
            if self._live:
                text = "\r\033[K" + text  # replace the live line
            self.stream.write(text if live else text + "\n")
            self._live = live
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def line(self, msg: str) -> None:
        """A line that stays."""
        self._write(f"[{self.tag}] {msg}", live=False)

    def status(self, msg: str) -> None:
        """A line that the next one replaces on a terminal."""
        self._write(f"[{self.tag}] {msg} ({self.elapsed():.1f} s)", live=True)

    def close(self, msg: str) -> None:
        self.line(f"{msg} in {self.elapsed():.1f} s")

    def stage(self, stage, info=None) -> None:
        """The ``progress(stage, info=None)`` callable handed to experiments."""
        self.line(f"{stage} ({self.elapsed():.1f} s)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``nqf`` (subcommands ``list``, ``reproduce``, ``validate``,
    ``compress``, ``info``)."""
    parser = _Parser(
        prog="nqf",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "Run 'nqf COMMAND --help' for the options of a command. Start with\n"
            "'nqf reproduce fig3' (a figure and its checks, ~10-20 s) and 'nqf validate'\n"
            "(every theorem check, ~1-2 min). Documentation: 'mkdocs serve' in the repository."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    lst = sub.add_parser(
        "list",
        help="list the reproducible figures",
        description="List the figures that 'nqf reproduce NAME' can reproduce, with a one-line description of each.",
    )

    rep = sub.add_parser(
        "reproduce",
        help="reproduce a paper figure (PNG + JSON with checks)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_REPRODUCE_HEAD,
        epilog="Example: nqf reproduce fig3 --out nqf-out   (writes nqf-out/fig3.png, nqf-out/fig3.json)",
    )
    rep.lazy_description = _reproduce_description
    lst.set_defaults(handler=_cmd_list, subparser=lst)
    rep.set_defaults(handler=_cmd_reproduce, subparser=rep)
    rep.add_argument("name", metavar="NAME", help="figure to reproduce (see 'nqf list')")
    rep.add_argument(
        "--out", metavar="DIR", default="nqf-out", help="output directory, created if missing (default: ./nqf-out)"
    )
    rep.add_argument(
        "--quick", action="store_true", help="reduced work (coarser grids, smaller problems); every check still runs"
    )
    rep.add_argument(
        "--strict-claims",
        action="store_true",
        help="exit status 1 also when a paper claim is 'not reproduced' (default: "
        "claims are reported, only the checks set the exit status)",
    )
    _add_progress_options(rep)

    val = sub.add_parser(
        "validate",
        help="check the flow solver against the exact solutions",
        description=(
            "Run every theorem check of the package: the flow on data satisfying Theorems 6, 7, "
            "16 and Proposition 7 at each initial scale eps against the exact solutions (max "
            "relative error over the whole trajectory <= 1e-8); each oracle refusing data that "
            "violates its assumption; the NTK of Eq. E25 against autodiff (<= 1e-12); the (M, mu) "
            "flow of Eq. E10 against weight space; the closed SGD maps of Theorem 2 / Corollary 2 "
            "(full batch, shared minibatches, weight decay, heavy-ball and Nesterov momentum, a "
            "general model with g and B) against weight-space training (<= 1e-10); and the checks "
            "later modules register. Prints a "
            "table name/value/bound/passed; exit status 1 if any check fails. Takes 1-2 minutes on "
            "a laptop CPU; a progress line goes to stderr (default: on if stderr is a terminal; "
            "--no-progress or NQF_PROGRESS=0 turns it off, --progress turns it on)."
        ),
    )
    val.set_defaults(handler=_cmd_validate, subparser=val)
    val.add_argument("--json", metavar="FILE", help='also write {"checks": [...]} to FILE')
    val.add_argument(
        "--eps",
        metavar="EPS",
        type=float,
        nargs="+",
        default=None,
        help="initial scales to test (default: 1e-3 1e-6 1e-12)",
    )
    _add_progress_options(val)
    _add_compress_parser(sub)

    inf = sub.add_parser(
        "info",
        help="versions, JAX backend and devices, float64, compilation cache",
        description=(
            "Print what nqf runs on: the versions of nqf, Python and its numerical dependencies "
            "(numpy, scipy, jax, jaxlib, diffrax, equinox, numba, matplotlib), the JAX backend "
            "and devices, whether float64 is enabled (nqf needs it), and the persistent JAX "
            "compilation cache (environment variable NQF_COMPILATION_CACHE, JAX's "
            "jax_compilation_cache_dir). Paste its output into bug reports."
        ),
    )
    inf.set_defaults(handler=_cmd_info, subparser=inf)
    inf.add_argument("--json", action="store_true", help="print the same as one JSON object")
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
    rows = [
        (c["name"], _fmt_value(c["value"]), _fmt_value(c["bound"]), "PASS" if c["passed"] else "FAIL") for c in checks
    ]
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


def _flat(v) -> str:
    """A claim value as text: a number, 'key value, ...' for a dict (nested in brackets), a list."""
    if isinstance(v, dict):
        return ", ".join(
            f"{k} {_flat(x) if not isinstance(x, (dict, list)) else '[' + _flat(x) + ']'}" for k, x in v.items()
        )
    if isinstance(v, (list, tuple)):
        return ", ".join(_flat(x) for x in v)
    return v if isinstance(v, str) else _fmt_value(v)


def _short(v, width: int = 48) -> str:
    """`_flat` cut to `width` characters."""
    text = _flat(v)
    return text if len(text) <= width else text[: width - 3] + "..."


def format_claims(claims, title: str = "claim") -> str:
    """A plain-text table of claim records (name, value, criterion, verdict, setting) and a count
    of the verdicts."""
    rows = [(c["name"], _short(c["value"]), _short(c["criterion"], 40), c["verdict"], c["setting"]) for c in claims]
    head = (title, "value", "criterion", "verdict", "setting")
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i]) for i in range(5)]
    line = lambda r: "  ".join(r[i].ljust(widths[i]) for i in range(5)).rstrip()  # noqa: E731
    out = [line(head), line(tuple("-" * w for w in widths))]
    out += [line(r) for r in rows]
    counts = {
        v: sum(c["verdict"] == v for c in claims)
        for v in ("reproduced", "not reproduced", "not expected at this setting")
    }
    out.append(f"{len(claims)} claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    return "\n".join(out)


def claims_not_reproduced(result: dict) -> list[dict]:
    """The claim records of an experiment's JSON with verdict "not reproduced" (the sensitivity
    rows at the paper's literal settings are not counted)."""
    return [c for c in result.get("claims", []) if c["verdict"] == "not reproduced"]


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
        parser.error(f"unknown figure {args.name!r}; valid names: {', '.join(experiments)} (see 'nqf list').")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out: {args.out!r} exists and is not a directory.")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as err:
        parser.error(f"--out: cannot create output directory {args.out!r}: {err.strerror}.")
    print(f"nqf reproduce {args.name}{' --quick' if args.quick else ''} -> {args.out}", flush=True)
    t0 = time.perf_counter()
    run = experiments[args.name]
    prog = _Progress(args.name, _progress_or_usage_error(args, parser))
    prog.line(f"running{' (quick)' if args.quick else ''} ...")
    kwargs = {"quick": args.quick}
    if prog.enabled and _accepts_progress(run):
        kwargs["progress"] = prog.stage
    result = run(args.out, **kwargs)
    n_fail = sum(not c["passed"] for c in result["checks"])
    prog.close(f"done, {len(result['checks']) - n_fail}/{len(result['checks'])} checks passed,")
    for line in _key_numbers(result):
        print(line)
    print(format_checks(result["checks"]))
    if result.get("claims"):
        print()
        print(format_claims(result["claims"]))
    sens = result.get("sensitivity") or {}
    if sens.get("skipped"):
        print(f"sensitivity: skipped ({sens.get('reason')})")
    for row in sens.get("rows", []):
        print()
        print(f"sensitivity, at {row['setting']} (reported, never counted):")
        print(format_claims(row["claims"]))
    print(f"wrote {result.get('png')} and {result.get('json')} ({time.perf_counter() - t0:.1f} s)")
    if not all(c["passed"] for c in result["checks"]):
        return 1
    if args.strict_claims and claims_not_reproduced(result):
        print(f"--strict-claims: {len(claims_not_reproduced(result))} claim(s) not reproduced")
        return 1
    return 0


def _progress_or_usage_error(args, parser) -> bool:
    """`progress_enabled` for a command; a bad NQF_PROGRESS is a usage error (exit status 2)."""
    try:
        return progress_enabled(args.progress)
    except ValueError as err:
        parser.error(str(err))


def _check_output_file(path: str | None, option: str, parser) -> None:
    """Usage error (exit status 2) unless `path` can be written: checked before a long run, so a
    typo in the output path does not cost the whole run. The file itself is not created."""
    if path is None:
        return
    if os.path.isdir(path):
        parser.error(f"{option}: {path!r} is a directory; give a file name.")
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(folder):
        parser.error(f"{option}: cannot write {path!r}: the directory {folder!r} does not exist.")
    if os.path.exists(path):
        ok = os.access(path, os.W_OK)
    else:
        ok = os.access(folder, os.W_OK | os.X_OK)
    if not ok:
        parser.error(f"{option}: cannot write {path!r}: permission denied.")


def _accepts_progress(fn) -> bool:
    """Whether an experiment's ``run`` takes a `progress` keyword (its stage reporter)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "progress" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _cmd_validate(args, parser) -> int:
    from .experiments._common import jsonable
    from .validate import validate

    kwargs = {} if args.eps is None else {"eps_values": tuple(args.eps)}
    _check_output_file(args.json, "--json", parser)
    prog = _Progress("validate", _progress_or_usage_error(args, parser))
    counts = {"n": 0, "failed": 0}

    def on_record(rec):
        counts["n"] += 1
        counts["failed"] += not rec["passed"]
        name = rec["name"] if len(rec["name"]) <= 70 else rec["name"][:67] + "..."
        prog.status(f"{counts['n']} checks, {counts['failed']} failed: {name}")

    if prog.enabled:
        kwargs["progress"] = on_record
    try:
        checks = validate(**kwargs)
    except ValueError as err:
        parser.error(f"--eps: {err}")
    prog.close(f"{counts['n']} checks, {counts['failed']} failed,")
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
        "compress",
        help="k_V, the compressed width d' and the Corollary 3 bound for a model",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Compress a width-d NQF (Theorem 3: d' = k_V + 1, exact; Corollary 3: smaller d',\n"
            "with the error bound E24), train the original and the compressed model with the\n"
            "same minibatches, and report k_V, d', the measured error and (Corollary 3) the bound\n"
            "and its tightness. DATA is a built-in generated set (mlp, phase-retrieval,\n"
            "matrix-completion) or an .npz file with A (m, p, p) | U (m, p, r) and s (m, r) |\n"
            "a (m, k, r) and b (m, q, r) (feed-forward) | Lambda (m, p) [and P], y (m,),\n"
            "optional g (m, p), B (m, p, p), f0 (m,), W0 (p, d).\n"
            "Library call: nqf.compress.compression_report(model, W0=..., lr=..., steps=...)."
        ),
    )
    cmp.set_defaults(handler=_cmd_compress, subparser=cmp)
    cmp.add_argument("data", metavar="DATA", help=f"one of {', '.join(_COMPRESS_DATASETS)} or a .npz path")
    cmp.add_argument("--d", type=int, default=500, help="original width when W0 is not given (default 500)")
    cmp.add_argument(
        "--d-prime", type=int, default=None, help="compressed width (default k_V + 1; below that: Corollary 3)"
    )
    cmp.add_argument("--lr", type=float, default=0.02, help="learning rate of the original (default 0.02)")
    cmp.add_argument("--steps", type=int, default=1000, help="SGD steps (default 1000)")
    cmp.add_argument("--batch-size", type=int, default=None, help="minibatch size (default min(32, m); 0: full batch)")
    cmp.add_argument(
        "--init-scale",
        type=float,
        default=0.3,
        help="W0 = scale * N(0, 1) / sqrt(d) when W0 is not given (default 0.3)",
    )
    cmp.add_argument("--seed", type=int, default=0, help="seed of W0 and the minibatches (default 0)")
    cmp.add_argument("--rtol", type=float, default=None, help="rank tolerance of k_V (default 1e-10)")
    cmp.add_argument("--json", metavar="FILE", help="also write the report to FILE")


def _load_compress_model(name: str):
    import numpy as np

    from .data import datasets
    from .data._model import NQFModel
    from .data._operators import CommutingData, DenseData, FeedForwardData, LowRankData

    if name == "mlp":
        return NQFModel(datasets.mlp_data(200, 39, rank=31)), None
    if name == "phase-retrieval":
        return NQFModel(datasets.phase_retrieval_data(200, 40, rank=30)), None
    if name == "matrix-completion":
        return NQFModel(datasets.matrix_completion_data(24, 16, 200, active_rows=20, active_cols=12)), None
    if not name.endswith(".npz"):
        raise ValueError(f"DATA must be one of {', '.join(_COMPRESS_DATASETS)} or an .npz file; found {name!r}.")
    if not os.path.isfile(name):
        raise ValueError(f"{name}: no such file.")
    try:
        with np.load(name, allow_pickle=False) as f:
            z = {k: f[k] for k in f.files}
    except Exception as err:  # zipfile.BadZipFile, EOFError, pickled objects, truncated members
        raise ValueError(f"{name}: not a readable .npz archive ({type(err).__name__}: {err}).") from None
    if not z:
        raise ValueError(
            f"{name}: the archive holds no arrays; expected 'y' (m,) and one data "
            "representation ('A', or 'U' and 's', or 'a' and 'b', or 'Lambda')."
        )
    if "y" not in z:
        raise ValueError(f"{name}: missing array 'y' (labels, shape (m,)); found {sorted(z)}.")
    kinds = [
        k
        for k, keys in (("A", ("A",)), ("U/s", ("U", "s")), ("a/b", ("a", "b")), ("Lambda", ("Lambda",)))
        if any(key in z for key in keys)
    ]
    if len(kinds) > 1:
        raise ValueError(
            f"{name}: holds several data representations ({', '.join(kinds)}); keep exactly "
            "one ('A', or 'U' and 's', or 'a' and 'b', or 'Lambda'): nqf will not guess which "
            "one is meant."
        )
    if "A" in z:
        data = DenseData(z["A"], z["y"])
    elif "U" in z and "s" in z:
        data = LowRankData(z["U"], z["s"], z["y"])
    elif "a" in z and "b" in z:
        data = FeedForwardData(z["a"], z["b"], z["y"])
    elif "Lambda" in z:
        data = CommutingData(z["Lambda"], z["y"], z.get("P"))
    else:
        raise ValueError(f"{name}: need 'A', or 'U' and 's', or 'a' and 'b', or 'Lambda'; found {sorted(z)}.")
    return NQFModel(data, g=z.get("g"), B=z.get("B"), f0=z.get("f0")), z.get("W0")


def _cmd_compress(args, parser) -> int:
    import numpy as np

    from .experiments._common import jsonable
    from .theory.compress import DEFAULT_RTOL, compression_report

    _check_output_file(args.json, "--json", parser)
    if args.d < 1:
        parser.error(f"--d: the width must be an integer >= 1; found {args.d}.")
    if not (np.isfinite(args.init_scale) and args.init_scale > 0):
        parser.error(
            f"--init-scale: must be finite and > 0 (W0 = scale * N(0, 1) / sqrt(d); 0 starts at "
            f"the saddle W = 0, where nothing trains); found {args.init_scale}."
        )
    if args.batch_size is not None and args.batch_size < 0:
        parser.error(f"--batch-size: must be >= 1, or 0 for full batch; found {args.batch_size}.")
    try:
        model, W0 = _load_compress_model(args.data)
        if W0 is None:
            rng = np.random.default_rng(args.seed)
            W0 = args.init_scale * rng.standard_normal((model.p, args.d)) / np.sqrt(args.d)
        batch = min(32, model.m) if args.batch_size is None else args.batch_size
        batch = None if batch == 0 else batch
        rep = compression_report(
            model,
            lr=args.lr,
            steps=args.steps,
            W0=W0,
            d_prime=args.d_prime,
            batch_size=batch,
            key=args.seed if batch else None,
            rtol=DEFAULT_RTOL if args.rtol is None else args.rtol,
        )
    except (ValueError, TypeError, OSError) as err:
        parser.error(str(err))
    except FloatingPointError as err:
        parser.error(f"--lr {args.lr:g}: training diverged ({err}); use a smaller --lr.")
    print(
        f"p = {model.p}, m = {model.m}: k_V = {rep['k_V']} (singular-value gap {rep['span_gap']:.3g}), "
        f"d = {rep['d']} -> d' = {rep['d_prime']} ({rep['kind']}), lr {rep['lr']:g} -> {rep['lr_compressed']:g}"
    )
    print(
        f"{rep['steps']} SGD steps: max rel output error {rep['max_output_rel_error']:.3g}, "
        f"max order-parameter error {rep['error']:.3g}"
    )
    if rep["kind"] == "corollary3":
        t = rep["tightness"]
        print(
            f"E24: tail {rep['tail']:.3g}, L {rep['L']:.3g}, bound at the end {rep['bound_final']:.3g}; "
            f"holds at every step: {rep['holds']}; bound/measured min {t['min']:.3g}, "
            f"median {t['median']:.3g}, final {t['final']:.3g}"
        )
        s = rep["tightness_sharpened"]
        print(f"sharpened e0 prod(1 + lr L_k): holds {rep['holds_sharpened']}, bound/measured final {s['final']:.3g}")
    if args.json:
        import json

        rep = dict(rep, span_singular_values=np.asarray(rep["span_singular_values"]))
        with open(args.json, "w") as fh:
            json.dump(jsonable(rep), fh, indent=2, allow_nan=False)
            fh.write("\n")
        print(f"wrote {args.json}")
    ok = rep["max_output_rel_error"] <= 1e-10 if rep["kind"] == "theorem3" else rep["holds"]
    return 0 if ok else 1


def _version() -> str:
    try:
        from . import __version__

        return __version__
    except ImportError:  # pragma: no cover
        return "unknown"


_INFO_PACKAGES = ("numpy", "scipy", "jax", "jaxlib", "diffrax", "equinox", "numba", "matplotlib")


def info() -> dict:
    """What ``nqf info`` prints, as a dict: versions (nqf, python, the numerical dependencies;
    None if a package is missing), platform, JAX backend and devices, float64 status and the
    persistent compilation cache (``NQF_COMPILATION_CACHE``, ``jax_compilation_cache_dir``)."""
    import importlib.metadata
    import platform

    versions = {"nqf": _version(), "python": platform.python_version()}
    for name in _INFO_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    out = {"versions": versions, "platform": platform.platform(), "cpu_count": os.cpu_count()}
    try:
        import jax

        from ._core import _config  # noqa: F401  (nqf's float64 and compilation cache, as a computation sees them)

        out["jax_backend"] = jax.default_backend()
        out["jax_devices"] = [f"{d.platform}:{d.id} ({getattr(d, 'device_kind', '?')})" for d in jax.devices()]
        out["float64"] = bool(jax.config.jax_enable_x64)
        cache_dir = getattr(jax.config, "jax_compilation_cache_dir", None)
    except Exception as err:  # report, do not crash: this is the command for bug reports
        out["jax_error"] = f"{type(err).__name__}: {err}"
        cache_dir = None
    env = os.environ.get("NQF_COMPILATION_CACHE")
    out["compilation_cache"] = {
        "NQF_COMPILATION_CACHE": env,
        "jax_compilation_cache_dir": cache_dir,
        "enabled": bool(cache_dir),
    }
    try:
        out["progress_default"] = progress_enabled()
    except ValueError as err:  # a bad NQF_PROGRESS: report it, do not crash
        out["progress_default"] = None
        out["progress_error"] = str(err)
    return out


def _cmd_info(args, parser) -> int:
    rep = info()
    if args.json:
        print(json.dumps(rep, indent=2))
        return 0
    v = rep["versions"]
    print(f"nqf {v['nqf']} (python {v['python']}, {rep['platform']}, {rep['cpu_count']} CPUs)")
    print("versions: " + ", ".join(f"{k} {v[k] or 'not installed'}" for k in _INFO_PACKAGES))
    if "jax_error" in rep:
        print(f"JAX: unavailable ({rep['jax_error']})")
    else:
        print(f"JAX backend: {rep['jax_backend']}; devices: {', '.join(rep['jax_devices'])}")
        print(f"float64 (jax_enable_x64): {'enabled' if rep['float64'] else 'DISABLED (nqf needs it)'}")
    cc = rep["compilation_cache"]
    env = cc["NQF_COMPILATION_CACHE"]
    if cc["enabled"]:
        where = cc["jax_compilation_cache_dir"]
        print(f"persistent compilation cache: {where}" + (f" (NQF_COMPILATION_CACHE={env})" if env else ""))
    elif env:
        print(
            f"persistent compilation cache: off: NQF_COMPILATION_CACHE={env} is set, but the "
            "directory could not be used (see the warning), or the value means off"
        )
    else:
        print(
            "persistent compilation cache: off (the default directory "
            "~/.cache/nqf/jax could not be used; NQF_COMPILATION_CACHE=DIR names another)"
        )
    if rep["progress_default"] is None:
        print(f"progress lines: {rep['progress_error']}")
    else:
        print(
            f"progress lines: {'on' if rep['progress_default'] else 'off'} by default here "
            "(NQF_PROGRESS=0/1, --progress/--no-progress)"
        )
    return 0


def main(argv=None) -> int:
    """Entry point of the ``nqf`` console script; returns the exit status.

    **Arguments:** `argv`, the arguments without the program name (default ``sys.argv[1:]``).
    Usage errors (unknown figure name, bad option) print a message and raise `SystemExit(2)`.
    """
    args = build_parser().parse_args(argv)
    return args.handler(args, args.subparser)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
