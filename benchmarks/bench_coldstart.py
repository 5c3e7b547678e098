"""asv benchmarks: cold start (issue 25, item 6).

Each number is one fresh Python process:

- ``timeraw_import_jax`` / ``timeraw_import_nqf``: ``import jax`` and ``import nqf`` (nqf's
  names load on first use, so ``import nqf`` does not import JAX);
- ``timeraw_cli_help`` / ``timeraw_cli_list``: ``nqf --help`` and ``nqf list`` (the CLI module,
  the parser, the registry's titles read from the sources);
- ``track_first_call``: ``import nqf`` + the first ``solve_flow`` on fig3 data (trace + compile
  + run), 'cold' (``NQF_COMPILATION_CACHE=0``), 'default' (the cache as shipped, on; a second
  process after one that filled it), 'explicit' (``NQF_COMPILATION_CACHE=DIR``, which also sets
  ``EQX_ON_ERROR=nan`` so diffrax's program is persisted; second process).

Run: ``asv run -E existing --quick --bench bench_coldstart``, or ``python
benchmarks/bench_coldstart.py [repeats]`` (medians of fresh processes, printed).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

FIRST_CALL = """
import json, time
t0 = time.perf_counter()
import numpy as np
import nqf
solve_flow, datasets = nqf.solve_flow, nqf.datasets  # the modules load here
t1 = time.perf_counter()
sol = solve_flow(datasets.fig3_data(), z0=np.full(5, 1e-3), t1=100.0)
float(sol.loss[-1])
t2 = time.perf_counter()
print(json.dumps([t2 - t0, t2 - t1]))
"""


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NQF_COMPILATION_CACHE", "EQX_ON_ERROR")}
    env.update(extra)
    return env


def first_call(mode: str, cache_dir: str) -> list:
    """[seconds from ``import nqf`` to the first fig3 ``solve_flow`` result, seconds of the call
    alone (nqf's modules already imported)], in a fresh process."""
    env = {
        "cold": _env(NQF_COMPILATION_CACHE="0"),
        "default": _env(XDG_CACHE_HOME=cache_dir),
        "explicit": _env(NQF_COMPILATION_CACHE=cache_dir),
    }[mode]
    out = subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def timeraw_import_jax():
    return "import jax"


def timeraw_import_nqf():
    return "import nqf"


def timeraw_cli_help():
    return """
import contextlib, io
from nqf.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["--help"])
"""


def timeraw_cli_list():
    return """
import contextlib, io
from nqf.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["list"])
"""


class FirstCall:
    params = [["cold", "default", "explicit"]]
    param_names = ["cache"]
    timeout = 600

    def setup_cache(self):
        out = {"cold": first_call("cold", "")}
        for mode in ("default", "explicit"):
            with tempfile.TemporaryDirectory() as d:
                first_call(mode, d)  # fills the cache
                out[mode] = first_call(mode, d)
        return out

    def track_first_call(self, cache, mode):
        return cache[mode][1]

    track_first_call.unit = "seconds"

    def track_import_and_first_call(self, cache, mode):
        return cache[mode][0]

    track_import_and_first_call.unit = "seconds"


def _wall(argv, env=None) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - t0


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    py = sys.executable
    rows = {
        "python -c pass": [py, "-c", "pass"],
        "import jax": [py, "-c", "import jax"],
        "import nqf": [py, "-c", "import nqf"],
        "import nqf; nqf.solve_flow": [py, "-c", "import nqf; nqf.solve_flow"],
        "nqf --help": [py, "-m", "nqf", "--help"],
        "nqf list": [py, "-m", "nqf", "list"],
    }
    for name, argv in rows.items():
        ts = [_wall(argv) for _ in range(n)]
        print(
            f"{name:28s} median {statistics.median(ts):.3f} s  (min {min(ts):.3f}, {n} processes, wall incl. startup)"
        )
    res = {"cold": [first_call("cold", "") for _ in range(max(2, n // 2))]}
    for mode in ("default", "explicit"):
        with tempfile.TemporaryDirectory() as d:
            first_call(mode, d)
            res[mode] = [first_call(mode, d) for _ in range(max(2, n // 2))]
    for mode, ts in res.items():
        call, total = [t[1] for t in ts], [t[0] for t in ts]
        print(
            f"first fig3 solve_flow, cache {mode:9s}: call {statistics.median(call):.3f} s (min {min(call):.3f}); "
            f"import nqf + call {statistics.median(total):.3f} s"
        )
