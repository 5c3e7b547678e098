"""Run each `nqf reproduce NAME --quick` once per test session (shared by test_cli.py,
test_experiments.py and the figures' own test files; the runs take ~10-100 s each).

Under pytest-xdist (`--dist loadfile`) the test files that need the same run may land on
different workers: the first worker to ask runs it and records (exit code, output folder,
stdout) in the session's shared temporary folder; a worker that asks for it meanwhile waits for
that run (a file lock per name) instead of running it again, then reads the same JSON file."""

import contextlib
import io
import json
import os
import pathlib

from nqf.cli import main

try:
    import fcntl
except ImportError:  # no POSIX file locks: each worker runs what it needs
    fcntl = None

_CACHE = {}


def _run(name, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"nqf-{name}")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["reproduce", name, "--quick", "--out", str(out)])
    return rc, out, buf.getvalue()


def _shared_dir(tmp_path_factory):
    """The folder shared by this session's xdist workers (None outside xdist)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return tmp_path_factory.getbasetemp().parent  # <session>/popen-gwN -> <session>


def _run_once_per_session(name, tmp_path_factory):
    shared = _shared_dir(tmp_path_factory)
    if shared is None or fcntl is None:
        return _run(name, tmp_path_factory)
    record = shared / f"nqf-quick-{name}.json"
    with open(shared / f"nqf-quick-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (also on an exception)
        if record.exists():
            rec = json.loads(record.read_text())
            return rec["rc"], pathlib.Path(rec["out"]), rec["stdout"]
        rc, out, stdout = _run(name, tmp_path_factory)
        record.write_text(json.dumps({"rc": rc, "out": str(out), "stdout": stdout}))
        return rc, out, stdout


def quick_run(name, tmp_path_factory):
    """Run ``nqf reproduce NAME --quick --out DIR`` through `main`; return
    ``(exit_code, out_dir, stdout, json_dict)`` (cached per name)."""
    if name not in _CACHE:
        rc, out, stdout = _run_once_per_session(name, tmp_path_factory)
        path = out / f"{name}.json"
        result = json.loads(path.read_text()) if path.exists() else None
        _CACHE[name] = (rc, out, stdout, result)
    return _CACHE[name]
