import os

import numpy as np
import pytest

import nqf  # noqa: F401  (enables float64)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_orthogonal(n, rng):
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    return Q * np.sign(np.diag(R))


def random_psd(p, rng, scale=1.0, rank=None):
    F = rng.standard_normal((p, rank or p))
    return scale * F @ F.T / p


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module. One pytest process compiles a few
    thousand XLA CPU executables; kept all together they exhaust the process's memory mappings
    (vm.max_map_count = 65530) and XLA segfaulted while compiling near the end of the suite
    (twice, in test_validate.py, 2026-12-01). Modules keep their own programs while they run."""
    yield
    import gc

    import jax

    jax.clear_caches()
    gc.collect()


# -- the slow suite's share of the test files (issue 37 item 1): tests/_slow_cases.py --------------------
@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the marks
def pytest_collection_modifyitems(config, items):
    """Mark `slow` the tests listed in tests/_slow_cases.py (a file, a test function or one case)
    and refuse an entry that names nothing collected from a file that was collected whole."""
    from _slow_cases import SLOW_CASES

    listed = set(SLOW_CASES)
    used = set()
    for item in items:
        nodeid = item.nodeid
        for key in (nodeid, nodeid.split("[", 1)[0], _file_of(nodeid)):
            if key in listed:
                item.add_marker(pytest.mark.slow)
                used.add(key)
    files = {_file_of(item.nodeid) for item in items}
    whole = not config.args or all(a.rstrip("/") in ("tests", str(config.rootpath / "tests")) for a in config.args)
    whole = whole and not config.getoption("lf", False) and not config.getoption("stepwise", False)
    # stale: in a file that was collected, or in a file that does not exist (renamed)
    stale = [k for k in sorted(listed - used) if _file_of(k) in files or not (config.rootpath / _file_of(k)).exists()]
    stale = stale if whole else []
    if stale and hasattr(config, "workerinput"):  # an xdist worker: the controller reports it and fails the run
        _STALE.extend(stale)
    elif stale:
        raise pytest.UsageError(f"tests/_slow_cases.py names tests that were not collected: {stale}")


_STALE: list[str] = []  # under xdist: the stale entries of tests/_slow_cases.py that the workers found


# -- per-file progress (issue 37 item 1): a line per finished test file, with its wall time ----------
_FILES: dict[str, list] = {}  # file -> [tests collected, tests finished, start of its first test]
_CONFIG: list = []


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_configure(config):
    _CONFIG.append(config)
    _compile_at_o0(config)


def _compile_at_o0(config):
    """The fast suite compiles its XLA CPU programs at the backend's optimization level 0
    (``--xla_backend_optimization_level=0``, in XLA_FLAGS, which its subprocesses inherit): its time
    is compilation, one program per shape and static argument (issue 37), and level 0 cuts it by
    a third (idle 2-core machine, empty persistent cache, 2026-12-05: backend compiles 882 -> 534 s
    summed over the workers, wall 11:52 -> 8:24 with the test changes of that day) with the same
    results at the suite's tolerances (1e-13 and up). The slow suite (``-m slow``: reproductions,
    docs pages, ``nqf validate``) runs long solves, whose code level 0 slows down, and compiles as
    users do (level 2, XLA's default), as does a run whose XLA_FLAGS already name a level. Set
    before the first JAX backend starts (``import nqf`` starts none)."""
    flags = os.environ.get("XLA_FLAGS", "")
    slow = "slow" in (config.getoption("markexpr") or "").replace("not slow", "")
    if not slow and "optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_backend_optimization_level=0").strip()


def pytest_xdist_node_collection_finished(node, ids):
    """Under pytest-xdist (the controller): every worker collects the same ids; count them once."""
    if not _FILES:
        for nodeid in ids:
            _FILES.setdefault(_file_of(nodeid), [0, 0, None])[0] += 1


def pytest_collection_finish(session):
    """Without xdist: the collected items (a worker's own collection is not counted)."""
    if hasattr(session.config, "workerinput") or session.config.getoption("numprocesses", None):
        return
    for item in session.items:
        _FILES.setdefault(_file_of(item.nodeid), [0, 0, None])[0] += 1


def pytest_runtest_logreport(report):
    import time

    entry = _FILES.get(_file_of(report.nodeid))
    if entry is None or not _CONFIG:
        return
    if report.when == "setup" and entry[2] is None:
        entry[2] = time.perf_counter()
    if report.when != "teardown":
        return
    entry[1] += 1
    tr = _CONFIG[0].pluginmanager.get_plugin("terminalreporter")
    if entry[1] == entry[0] and tr is not None:
        done = sum(1 for e in _FILES.values() if e[1] == e[0])
        tr.write_line(
            f"[{done}/{len(_FILES)} files] {_file_of(report.nodeid)}: {entry[0]} tests in "
            f"{time.perf_counter() - entry[2]:.0f} s"
        )


# -- compile count (issue 37 item 1): JAX traces and backend compiles of the run, summed over workers ----
# (`NQF_COMPILE_LOG=PREFIX` also writes one line per backend compile: test, program, seconds, to PREFIX.<pid>)
_COMPILES = {"trace": 0, "trace_s": 0.0, "compile": 0, "compile_s": 0.0, "cache_hit": 0}
_LOG = open(f"{os.environ['NQF_COMPILE_LOG']}.{os.getpid()}", "w") if os.environ.get("NQF_COMPILE_LOG") else None
_CURRENT_TEST = [""]


def _count_durations(event, duration, **kwargs):
    from _jax_events import BACKEND_COMPILE, TRACE

    if event == TRACE:
        _COMPILES["trace"] += 1
        _COMPILES["trace_s"] += duration
    elif event == BACKEND_COMPILE:  # includes the programs read back from the persistent cache
        _COMPILES["compile"] += 1
        _COMPILES["compile_s"] += duration
        if _LOG is not None:
            _LOG.write(f"{_CURRENT_TEST[0]}\t{kwargs.get('fun_name')}\t{duration:.4f}\n")


def _count_events(event, **kwargs):
    if event == "/jax/compilation_cache/cache_hits":
        _COMPILES["cache_hit"] += 1


def pytest_sessionstart(session):
    import jax

    jax.monitoring.register_event_duration_secs_listener(_count_durations)
    jax.monitoring.register_event_listener(_count_events)


def pytest_runtest_setup(item):
    _CURRENT_TEST[0] = item.nodeid


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: hand the counts to the controller
        session.config.workeroutput["nqf_compiles"] = dict(_COMPILES)
        session.config.workeroutput["nqf_stale"] = list(_STALE)
    elif _STALE:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def pytest_testnodedown(node, error):
    """Under pytest-xdist (the controller): add up the workers' counts."""
    out = getattr(node, "workeroutput", {})
    for key, value in (out.get("nqf_compiles") or {}).items():
        _COMPILES[key] += value
    _STALE.extend(k for k in out.get("nqf_stale") or () if k not in _STALE)


def pytest_terminal_summary(terminalreporter):
    if _STALE:
        terminalreporter.write_line(
            f"ERROR: tests/_slow_cases.py names tests that were not collected (renamed?): {_STALE}", red=True
        )
    c = _COMPILES
    terminalreporter.write_line(
        f"JAX: {c['trace']} jaxpr traces ({c['trace_s']:.0f} s), {c['compile']} backend compiles "
        f"({c['compile_s']:.0f} s, of which {c['cache_hit']} read from the persistent compilation cache), "
        f"summed over workers; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
    )
