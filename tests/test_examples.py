"""Every script in examples/ runs to completion as a user would run it (so the examples never
rot): ``python examples/NAME.py`` in a fresh process, with a time limit, any figure written to
the directory named by NQF_EXAMPLES_OUT, nothing written to the working directory."""

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # the examples (python -m pytest -m slow)

EXAMPLES = sorted((pathlib.Path(__file__).parents[1] / "examples").glob("*.py"))
TIMEOUT_S = 240  # each example takes well under a minute on an idle 2-core CPU; headroom for load


def test_examples_exist():
    names = {p.name for p in EXAMPLES}
    assert {
        "quickstart.py",
        "define_a_layer.py",
        "ignition_times.py",
        "eps_sweep.py",
        "compress_wide_model.py",
        "benchmark_custom_data.py",
    } <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path, tmp_path):
    out, cwd = tmp_path / "figures", tmp_path / "cwd"
    cwd.mkdir()
    env = dict(os.environ, NQF_EXAMPLES_OUT=str(out), MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 0, f"{path.name} failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip()
    assert not any(cwd.iterdir()), f"{path.name} wrote into the working directory"
    if "savefig" in path.read_text():
        pngs = list(out.glob("*.png"))
        assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
