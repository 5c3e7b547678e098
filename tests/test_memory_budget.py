"""Issue 36: every public size argument is estimated before it is allocated.

All cases of `tests/_memory_cases.py` (sgd_sde's paths and saved times, closed_sgd's saved states
and batch schedule, batch_indices, MapTerm.solve, map_term's schedule, closed_sgd_sweep's members,
train_w, glv_gd, solve_flow's saved times and copies of a dense A, solve_sweep's members,
solve_modified_flow's and theorem6's times, record's and predict's saves) run in ONE child
process (one import of JAX) with a 2 GB budget (NQF_MEMORY_BUDGET) and an address-space limit
(RLIMIT_AS) of 4 GB, set before JAX is imported: JAX and XLA reserve virtual address space at
import, and `import nqf, jax` with a small solve works under 2 GB (measured 2026, issue 36), so
4 GB leaves room for the small inputs while an allocation the estimate missed fails inside the
child (XLA's RESOURCE_EXHAUSTED or an abort), never through the machine's OOM killer. On main
before issue 36 eleven of these cases were not refused (XLA ran out of memory after 2-19 s, one
aborted the process).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).with_name("_memory_cases.py")
LIMIT = 4e9  # RLIMIT_AS of the child (bytes)
BUDGET = 2e9  # NQF_MEMORY_BUDGET of the child


@pytest.fixture(scope="module")
def rows():
    env = dict(os.environ, NQF_MEMORY_BUDGET=f"{BUDGET:.0f}", JAX_PLATFORMS="cpu")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, str(CASES), f"{LIMIT:.0f}"], capture_output=True, text=True, env=env, timeout=300
    )
    out = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            out[row["case"]] = row
    return out, run


def _names():
    import ast

    tree = ast.parse(CASES.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_cases")
    ret = next(n for n in ast.walk(fn) if isinstance(n, ast.Return))
    assert isinstance(ret.value, ast.Dict)
    return [ast.literal_eval(k) for k in ret.value.keys if k is not None]


@pytest.mark.parametrize("case", _names())
def test_size_argument_refused_before_allocation(rows, case):
    """A clear `MemoryBudgetError` (the estimate, the budget, the ways out) within a second of
    the call; a missing row means the child died in this case (e.g. aborted out of memory)."""
    out, run = rows
    assert case in out, f"the child died in or before {case!r} (rc {run.returncode}): {run.stderr[-2000:]}"
    row = out[case]
    assert row["error"] == "MemoryBudgetError", row
    assert row["nbytes"] > row["budget"] and row["budget"] in (BUDGET, 5e8), row  # 5e8: memory_budget=
    assert "over the memory budget of" in row["message"] and "Ways out:" in row["message"], row
    assert row["seconds"] < 1.0, row


def test_the_default_budget_respects_the_address_space_limit():
    """Issue 36 trial: under `ulimit -v 8000000` the default budget (half the machine's available
    memory, 12 GB) let a 4 GB save through to XLA's RESOURCE_EXHAUSTED. The default budget is now
    at most half of what RLIMIT_AS leaves above the process's virtual size."""
    import subprocess
    import sys

    code = (
        "import os, resource\n"
        "os.environ.pop('NQF_MEMORY_BUDGET', None)\n"
        "from nqf._core import memory\n"
        "used = next(float(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmSize:'))\n"
        "resource.setrlimit(resource.RLIMIT_AS, (int(used + 2e9), resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
        "b = memory.budget()\n"
        "assert 0 < b <= 1.0e9, b\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
