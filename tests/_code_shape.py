"""The shape of nqf's functions (issue 25, 37): parameter counts and lengths, read from the source.

Shared by `tests/test_layout.py` (which enforces the limits) and `benchmarks/code_shape.py` (which
prints the distribution)."""

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "nqf"

MAX_LINES = 120  # a function's span from `def` to its last line, docstring included (decorators not)
MAX_PARAMS = 12  # named parameters (positional and keyword-only; self/cls, *args and **kwargs not counted)


def functions(root: pathlib.Path = SRC):
    """(path relative to `root`, name, parameters, lines) of every function and method under
    `root`, nested ones included."""
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                n -= bool(a.args and a.args[0].arg in ("self", "cls"))
                yield path.relative_to(root), node.name, n, node.end_lineno - node.lineno + 1


def over_limits(rows, max_lines: int = MAX_LINES, max_params: int = MAX_PARAMS):
    """The rows of `functions` over `max_lines` lines or `max_params` parameters, longest first."""
    return sorted((r for r in rows if r[3] > max_lines or r[2] > max_params), key=lambda r: -r[3])
