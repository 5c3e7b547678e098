"""Function-size report for src/nqf (issue 25): parameter counts and function lengths.

Run: python benchmarks/code_shape.py [--limit-lines 120 --limit-params 12]
(the walker and the limits live in tests/_code_shape.py; tests/test_layout.py enforces them)
Prints the distribution, the public parameter counts of solve_flow / solve_sweep, the lines of
solvers/_solve.py and solvers/_sweep.py, and every function over the limits.
"""

import argparse
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from _code_shape import MAX_LINES, MAX_PARAMS, SRC, functions, over_limits  # shared with tests/test_layout.py


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--limit-lines", type=int, default=MAX_LINES)
    ap.add_argument("--limit-params", type=int, default=MAX_PARAMS)
    args = ap.parse_args()
    rows = list(functions())
    params = np.array([r[2] for r in rows])
    lines = np.array([r[3] for r in rows])
    q = [50, 90, 99, 100]
    print(f"{len(rows)} functions")
    print("parameters  p50/p90/p99/max:", *np.percentile(params, q).round(1))
    print("lines       p50/p90/p99/max:", *np.percentile(lines, q).round(1))
    for name in ("solve_flow", "solve_sweep"):
        print(f"{name}: {[r[2] for r in rows if r[1] == name]} parameters")
    for f in ("solvers/_solve.py", "solvers/_sweep.py"):
        p = SRC / f
        print(f"{f}: {len(p.read_text().splitlines()) if p.exists() else 0} lines")
    over = over_limits(rows, args.limit_lines, args.limit_params)
    print(f"{len(over)} functions over {args.limit_lines} lines or {args.limit_params} parameters:")
    for path, name, n, ln in over:
        print(f"  {path}:{name}  params={n} lines={ln}")


if __name__ == "__main__":
    main()
