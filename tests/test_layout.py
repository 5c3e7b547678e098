"""The package layout: nqf is data -> dynamics -> solvers -> theory -> validate -> experiments ->
CLI over a private `_core`. The import graph, derived here from the source (every import,
including those inside functions), has no cycle and no import from a lower layer to a higher
one; the public surface keeps every name of nqf 0.1, old module paths included."""

import ast
import importlib
import json
import pathlib
import pickle

import pytest

import nqf

SRC = pathlib.Path(__file__).parents[1] / "src" / "nqf"

# Each layer may import its own and the lower layers only (THEORY of the layout: nqf/__init__).
LAYERS = ("_core", "data", "dynamics", "solvers", "theory", "network", "validate", "experiments", "nqf", "cli")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_graph() -> dict[str, set[str]]:
    """module -> the nqf modules it imports (absolute names; `from pkg import mod` counts mod)."""
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name.split(".")[0] == "nqf"}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    pkg = base[: len(base) - node.level + 1]
                    mod = ".".join(pkg + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                if mod.split(".")[0] != "nqf":
                    continue
                for a in node.names:
                    sub = f"{mod}.{a.name}"
                    edges.add(sub if sub in files else mod)
        graph[name] = {e for e in edges if e != name}
        unknown = graph[name] - set(files)
        assert not unknown, f"{name} imports modules that do not exist: {sorted(unknown)}"
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return LAYERS.index("nqf")
    head = parts[1]
    return LAYERS.index("cli") if head in ("cli", "__main__") else LAYERS.index(head)


GRAPH = _import_graph()


def test_every_module_sits_in_a_layer():
    assert set(GRAPH) >= {
        "nqf",
        "nqf.cli",
        "nqf._core",
        "nqf.data",
        "nqf.dynamics",
        "nqf.solvers",
        "nqf.theory",
        "nqf.network",
        "nqf.validate",
        "nqf.experiments",
    }
    for module in GRAPH:  # raises ValueError for a module outside the layers
        _layer(module)


def test_no_import_from_a_lower_layer_to_a_higher_one():
    upward = [
        f"{m} ({LAYERS[_layer(m)]}) imports {t} ({LAYERS[_layer(t)]})"
        for m, targets in GRAPH.items()
        for t in targets
        if _layer(t) > _layer(m) and not (m == "nqf" or t == "nqf" and m.startswith("nqf.cli"))
    ]
    # the package __init__ of a layer's parent is not an import of that layer: `nqf` (the public
    # surface) imports every layer, and only the CLI (above it) imports `nqf`
    assert not upward, "\n".join(upward)


def test_import_graph_has_no_cycle():
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(GRAPH[m]):  # a module importing its own package closes a cycle too
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t) :] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checker_sees_upward_imports_and_cycles():
    """The rules above fail on the graphs they exist to refuse."""
    assert _layer("nqf.data._operators") < _layer("nqf.solvers._solve") < _layer("nqf.theory._oracles")
    saved = dict(GRAPH)
    try:
        GRAPH["nqf.data._operators"] = saved["nqf.data._operators"] | {"nqf.solvers._solve"}
        with pytest.raises(AssertionError, match="data._operators"):
            test_no_import_from_a_lower_layer_to_a_higher_one()
        GRAPH["nqf.data._operators"] = saved["nqf.data._operators"]
        GRAPH["nqf._core._checks"] = saved["nqf._core._checks"] | {"nqf._core.io"}
        GRAPH["nqf._core.io"] = saved["nqf._core.io"] | {"nqf._core._checks"}
        with pytest.raises(AssertionError, match="import cycles"):
            test_import_graph_has_no_cycle()
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


@pytest.mark.parametrize("pkg", ["_core", "data", "dynamics", "solvers", "theory", "validate"])
def test_each_subpackage_says_what_lives_there_and_what_it_may_import(pkg):
    doc = importlib.import_module(f"nqf.{pkg}").__doc__
    assert doc and "import" in doc and "layer" in doc, pkg
    public = getattr(importlib.import_module(f"nqf.{pkg}"), "__all__", [])
    mod = importlib.import_module(f"nqf.{pkg}")
    assert all(hasattr(mod, n) for n in public)


# nqf 0.1's public names: the top level, the public namespaces, and the flat module paths
OLD_TOP_LEVEL = """AbstractCommutingData AbstractData AssumptionError BlockData CommutingData Compression DeepNQF
DegenerateWarning DenseData DiagonalData ExtractionError FeedForwardData FlowSolution GLVTrajectory He2Data
LowRankData MapSweep MapTrajectory MaxStepsReached NQFModel NormalizationError OracleSolution PerSampleLoss
PowerLawFit SOLVERS SampleOracleSolution SmoothnessError Stop SweepSolution SymmetryError WTrajectory
ZGZWarning batch_indices batch_weights closed_deep_sgd closed_map closed_sgd closed_sgd_sweep compress
compress_deep compression_report corollary3 data_span datasets enable_compilation_cache exact excess_loss
extract extract_report feedforward_data fit_power_law glv_equilibrium glv_gd glv_rhs k_V kernels linearized
linearized_horizon load measure_ignition_times measure_sample_ignition_times memory modules mse multilayer ntk
powerlaw predicted_ignition_times proposition7 rosenbrock sample_ignition_times samplewise samplewise_rates
save solve_flow solve_sweep spectral staircase_limit stiff structure theorem16 theorem3 theorem4 theorem5
theorem6 theorem6_rates theorem7 theorem7_commuting train_deep_w train_w validate __version__""".split()

# every public module-level name of each flat module of nqf 0.1 (src/nqf/*.py at 318f51f,
# extracted once from the source: its __all__ and its public top-level definitions)
OLD_MODULES = json.loads((pathlib.Path(__file__).parent / "layout_nqf_0_1_names.json").read_text())


def test_every_top_level_name_of_0_1_is_still_there():
    assert not [n for n in OLD_TOP_LEVEL if not hasattr(nqf, n)]
    assert set(nqf.__all__) <= set(dir(nqf))


@pytest.mark.parametrize("path", sorted(OLD_MODULES))
def test_old_module_paths_import_with_every_public_name(path):
    module = importlib.import_module(path)
    assert len(OLD_MODULES) == 35 and OLD_MODULES[path]
    missing = [n for n in OLD_MODULES[path] if not hasattr(module, n)]
    assert not missing, f"{path} lost {missing}"
    leaf = path.split(".")[1]
    if leaf not in ("ntk", "extract"):  # in 0.1 too, nqf.ntk and nqf.extract were the functions
        assert getattr(nqf, leaf) is module


def test_pickles_name_public_paths_and_old_ones_load():
    """Classes pickle under their public home (nqf.solvers.Stop, not the private module), and a
    pickle of nqf 0.1 that names the flat module path (nqf.events.Stop) still loads."""
    stop = nqf.Stop.loss_below(0.25)
    blob = pickle.dumps(stop, protocol=0)  # text opcodes: the module path can be edited in place
    assert b"cnqf.solvers\nStop\n" in blob and b"_events" not in blob
    for cls in (nqf.FlowSolution, nqf.DenseData, nqf.NQFModel, nqf.OracleSolution, nqf.AssumptionError):
        assert not any(part.startswith("_") for part in cls.__module__.split(".")), cls
    old = pickle.loads(blob.replace(b"cnqf.solvers\nStop\n", b"cnqf.events\nStop\n"))
    assert old == stop
    err = pickle.loads(pickle.dumps(nqf.AssumptionError("Theorem 6", "cond", 0.5, 1e-10, where="(0, 1)")))
    assert (err.theorem, err.residual, err.where) == ("Theorem 6", 0.5, "(0, 1)") and "cond" in str(err)


def test_no_function_over_120_lines_or_12_parameters():
    """Issue 37: every function of src/nqf fits in a head (`tests/_code_shape.py`; the distribution:
    `python benchmarks/code_shape.py`)."""
    from _code_shape import MAX_LINES, MAX_PARAMS, functions, over_limits

    rows = list(functions())
    assert len(rows) > 1000  # the walker sees the package
    over = over_limits(rows)
    assert not over, f"{len(over)} functions over {MAX_LINES} lines or {MAX_PARAMS} parameters:\n" + "\n".join(
        f"  {path}:{name}  params={n} lines={ln}" for path, name, n, ln in over
    )
