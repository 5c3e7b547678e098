"""The documentation: the site builds with warnings as errors, every public name of nqf is in the
generated API reference, every public module has a reference page, the theory map covers the top
level, and the Python code on the newcomer's pages (README, getting started, guides) runs."""

import importlib
import os
import pathlib
import re
import subprocess
import sys
import time
import types

import pytest

import nqf

pytestmark = pytest.mark.slow  # the docs pages (python -m pytest -m slow)

ROOT = pathlib.Path(__file__).parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """``mkdocs build --strict`` into a temporary directory (what CI runs); returns the site path."""
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
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
    """nqf's public modules, from the source tree: the public subpackages (``src/nqf/NAME/``, NAME
    without a leading underscore), the public modules inside them (``nqf.solvers.stiff``), the
    public top-level modules (``nqf.cli``), and the namespace modules of ``nqf.__all__`` whose home
    is private (``nqf.memory`` = ``nqf._core.memory``)."""
    src = ROOT / "src" / "nqf"
    mods = {f"nqf.{p.stem}" for p in src.glob("*.py") if not p.stem.startswith("_")}
    for init in src.rglob("__init__.py"):
        parts = init.parent.relative_to(src).parts
        if not parts or any(part.startswith("_") for part in parts):
            continue
        pkg = ".".join(("nqf",) + parts)
        mods.add(pkg)
        mods |= {f"{pkg}.{p.stem}" for p in init.parent.glob("*.py") if not p.stem.startswith("_")}
    for name in nqf.__all__:
        obj = getattr(nqf, name)
        if isinstance(obj, types.ModuleType) and any(part.startswith("_") for part in obj.__name__.split(".")):
            mods.add(f"nqf.{name}")
    return sorted(mods)


def _page(mod: str) -> str:
    """The reference page of a public module: nqf.solvers -> reference/solvers.md,
    nqf.solvers.stiff -> reference/solvers/stiff.md."""
    return "reference/" + "/".join(mod.split(".")[1:]) + ".md"


def _anchors(name: str) -> set[str]:
    """The anchor ids that document ``nqf.NAME``: NAME on the page of each public module that
    re-exports the same object in its ``__all__`` (``nqf.solvers.solve_flow``), or on the page of the
    module that defines it (``nqf._core._cache.enable_compilation_cache``)."""
    obj = getattr(nqf, name)
    anchors = set()
    for mod in _public_modules():
        module = sys.modules.get(mod)  # what `import nqf` loaded (not the experiments, not the CLI)
        if module is not None and name in getattr(module, "__all__", ()) and getattr(module, name) is obj:
            anchors.add(f"{mod}.{name}")
    home = getattr(obj, "__module__", None)
    if isinstance(home, str) and home.startswith("nqf."):
        anchors.add(f"{home}.{name}")
    return anchors


def test_docs_build_strict(site):
    assert (site / "index.html").exists()
    for page in (
        "getting-started",
        "theory",
        "numerics",
        "guides/simulate-a-layer",
        "guides/validate-a-theorem",
        "guides/map-sweeps",
        "guides/benchmarks",
        "guides/examples",
        "reference",
        "reference/solvers",
        "reference/solvers/stiff",
    ):
        assert (site / page / "index.html").exists(), page


def test_every_public_name_is_in_the_api_reference(site):
    ids = _ids(site)
    missing = [name for name in _top_level_names() if not _anchors(name) & ids]
    assert not missing, f"public names without an API reference entry: {missing}"


def test_every_public_module_is_rendered_with_its_all(site):
    """Each public module's page renders the module and every name of its ``__all__`` (a
    subpackage's re-exports from its private modules included)."""
    ids = _ids(site)
    missing = []
    for mod in _public_modules():
        module = importlib.import_module(mod)
        expected = [mod] + [f"{mod}.{n}" for n in getattr(module, "__all__", ())]
        missing += [i for i in expected if i not in ids]
    assert not missing, f"not in the built API reference: {missing}"


def test_every_public_module_has_a_reference_page():
    nav = (ROOT / "mkdocs.yml").read_text()
    problems = []
    for mod in _public_modules():
        page = DOCS / _page(mod)
        if not page.exists() or not re.search(rf"^::: {re.escape(mod)}$", page.read_text(), re.M):
            problems.append(f"docs/{_page(mod)} with the line '::: {mod}'")
        if not re.search(rf"^\s*- {re.escape(mod)}: {re.escape(_page(mod))}$", nav, re.M):
            problems.append(f"mkdocs.yml nav entry '- {mod}: {_page(mod)}'")
    assert not problems, "add: " + "; ".join(problems)


def test_theory_map_covers_the_top_level():
    text = (DOCS / "theory.md").read_text()
    missing = [n for n in _top_level_names() if f"`{n}`" not in text and n != "__version__"]
    assert not missing, f"docs/theory.md does not mention: {missing}"


def _python_blocks(path: pathlib.Path) -> str:
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
    return "\n".join(b for b in blocks if "--8<--" not in b)  # snippets are examples/, run elsewhere


@pytest.mark.parametrize(
    "page",
    [
        "README.md",
        "docs/getting-started.md",
        "docs/guides/predict-your-network.md",
        "docs/guides/simulate-a-layer.md",
        "docs/guides/validate-a-theorem.md",
        "docs/guides/map-sweeps.md",
        "docs/guides/finite-lr-and-noise.md",
        "docs/guides/jax.md",
        "docs/guides/two-power-laws.md",
        "docs/guides/many-machines.md",
    ],
)
def test_page_code_runs(page, tmp_path):
    """The Python blocks of a page, in order, in one fresh process (as a reader would paste them)."""
    code = _python_blocks(ROOT / page)
    assert code.strip()
    env = dict(os.environ, MPLBACKEND="Agg", NQF_PROGRESS="0")
    if env.get("PYTHONPATH"):  # the subprocesses run in tmp_path: keep relative entries (PYTHONPATH=src) valid
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    if "nqf-out/fig3.json" in code:  # the page's previous step: `nqf reproduce fig3` (quick here)
        proc = subprocess.run(
            [sys.executable, "-m", "nqf", "reproduce", "fig3", "--quick", "--out", "nqf-out"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run(  # the guide 'Predict your network' runs ~250 s on a busy 2-core CPU (issue 35's sections)
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{page}:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip()
