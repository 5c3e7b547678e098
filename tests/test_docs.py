"""The documentation: the site builds with warnings as errors, every public name of nqf is in the
generated API reference, every public module has a reference page, the theory map covers the top
level, and the Python code on the newcomer's pages (README, getting started, guides) runs."""

import os
import pathlib
import re
import subprocess
import sys
import time
import types

import pytest

import nqf

ROOT = pathlib.Path(__file__).parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """``mkdocs build --strict`` into a temporary directory (what CI runs); returns the site path."""
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert elapsed < 120, f"the docs build took {elapsed:.0f} s"
    return out


def _ids(site) -> set[str]:
    text = "".join(p.read_text() for p in (site / "reference").rglob("*.html"))
    return set(re.findall(r'id="(nqf\.[A-Za-z0-9_.]+)"', text))


def _top_level_names() -> list[str]:
    names = getattr(nqf, "__all__", None) or [n for n in vars(nqf) if not n.startswith("_")]
    return sorted(n for n in names if not isinstance(getattr(nqf, n), types.ModuleType))


def _public_modules() -> list[str]:
    src = ROOT / "src" / "nqf"
    mods = [p.stem for p in src.glob("*.py") if not p.stem.startswith("_")]
    mods += [p.parent.name for p in src.glob("*/__init__.py") if not p.parent.name.startswith("_")]
    return sorted(mods)


def test_docs_build_strict(site):
    assert (site / "index.html").exists()
    for page in ("getting-started", "theory", "numerics", "guides/simulate-a-layer",
                 "guides/validate-a-theorem", "guides/map-sweeps", "guides/benchmarks", "guides/examples",
                 "reference"):
        assert (site / page / "index.html").exists(), page


def test_every_public_name_is_in_the_api_reference(site):
    ids = _ids(site)
    missing = []
    for name in _top_level_names():
        mod = getattr(getattr(nqf, name), "__module__", None)
        if mod and mod.startswith("nqf.") and f"{mod}.{name}" in ids:
            continue
        if not any(i.endswith("." + name) and i.count(".") == 2 for i in ids):
            missing.append(name)
    assert not missing, f"public names without an API reference entry: {missing}"


def test_every_public_module_has_a_reference_page():
    nav = (ROOT / "mkdocs.yml").read_text()
    problems = []
    for mod in _public_modules():
        page = DOCS / "reference" / f"{mod}.md"
        if not page.exists() or f"::: nqf.{mod}" not in page.read_text():
            problems.append(f"docs/reference/{mod}.md with the line '::: nqf.{mod}'")
        if f"reference/{mod}.md" not in nav:
            problems.append(f"mkdocs.yml nav entry '- nqf.{mod}: reference/{mod}.md'")
    assert not problems, "add: " + "; ".join(problems)


def test_theory_map_covers_the_top_level():
    text = (DOCS / "theory.md").read_text()
    missing = [n for n in _top_level_names() if f"`{n}`" not in text and n != "__version__"]
    assert not missing, f"docs/theory.md does not mention: {missing}"


def _python_blocks(path: pathlib.Path) -> str:
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
    return "\n".join(b for b in blocks if "--8<--" not in b)  # snippets are examples/, run elsewhere


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md", "docs/guides/simulate-a-layer.md",
                                  "docs/guides/validate-a-theorem.md", "docs/guides/map-sweeps.md",
                                  "docs/guides/jax.md", "docs/guides/two-power-laws.md"])
def test_page_code_runs(page, tmp_path):
    """The Python blocks of a page, in order, in one fresh process (as a reader would paste them)."""
    code = _python_blocks(ROOT / page)
    assert code.strip()
    env = dict(os.environ, MPLBACKEND="Agg", NQF_PROGRESS="0")
    if env.get("PYTHONPATH"):  # the subprocesses run in tmp_path: keep relative entries (PYTHONPATH=src) valid
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    if "nqf-out/fig3.json" in code:  # the page's previous step: `nqf reproduce fig3` (quick here)
        proc = subprocess.run([sys.executable, "-m", "nqf", "reproduce", "fig3", "--quick", "--out", "nqf-out"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"{page}:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip()
