"""Run each `nqf reproduce NAME --quick` once per test session (shared by test_cli.py and
test_experiments.py; the runs take ~10 s each)."""

import contextlib
import io
import json

from nqf.cli import main

_CACHE = {}


def quick_run(name, tmp_path_factory):
    """Run ``nqf reproduce NAME --quick --out DIR`` through `main`; return
    ``(exit_code, out_dir, stdout, json_dict)`` (cached per name)."""
    if name not in _CACHE:
        out = tmp_path_factory.mktemp(f"nqf-{name}")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main(["reproduce", name, "--quick", "--out", str(out)])
        path = out / f"{name}.json"
        result = json.loads(path.read_text()) if path.exists() else None
        _CACHE[name] = (rc, out, buf.getvalue(), result)
    return _CACHE[name]
