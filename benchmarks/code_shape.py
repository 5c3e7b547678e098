"""Function-size report for src/nqf (issue 25): parameter counts and function lengths.

Run: python benchmarks/code_shape.py [--limit-lines 120 --limit-params 12]
Prints the distribution, the public parameter counts of solve_flow / solve_sweep, the lines of
solvers/_solve.py and solvers/_sweep.py, and every function over the limits.
"""

import argparse
import ast
import pathlib

import numpy as np

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "nqf"


def functions(root=SRC):
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                n -= bool(a.args and a.args[0].arg in ("self", "cls"))
                yield path.relative_to(root), node.name, n, node.end_lineno - node.lineno + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--limit-lines", type=int, default=120)
    ap.add_argument("--limit-params", type=int, default=12)
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
    over = [r for r in rows if r[3] > args.limit_lines or r[2] > args.limit_params]
    print(f"{len(over)} functions over {args.limit_lines} lines or {args.limit_params} parameters:")
    for path, name, n, ln in sorted(over, key=lambda r: -r[3]):
        print(f"  {path}:{name}  params={n} lines={ln}")


if __name__ == "__main__":
    main()
