"""The package layout: nqf is data -> dynamics -> solvers -> theory -> validate -> experiments ->
CLI over a private `_core`. The import graph, derived here from the source (every import,
including those inside functions), has no cycle and no import from a lower layer to a higher
one; the public surface keeps every name of nqf 0.1, old module paths included."""

import ast
import importlib
import pathlib
import pickle

import pytest

import nqf

SRC = pathlib.Path(__file__).parents[1] / "src" / "nqf"

# Each layer may import its own and the lower layers only (THEORY of the layout: nqf/__init__).
LAYERS = ("_core", "data", "dynamics", "solvers", "theory", "validate", "experiments", "nqf", "cli")


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
    assert set(GRAPH) >= {"nqf", "nqf.cli", "nqf._core", "nqf.data", "nqf.dynamics", "nqf.solvers",
                          "nqf.theory", "nqf.validate", "nqf.experiments"}
    for module in GRAPH:  # raises ValueError for a module outside the layers
        _layer(module)


def test_no_import_from_a_lower_layer_to_a_higher_one():
    upward = [f"{m} ({LAYERS[_layer(m)]}) imports {t} ({LAYERS[_layer(t)]})"
              for m, targets in GRAPH.items() for t in targets
              if _layer(t) > _layer(m) and not (m == "nqf" or t == "nqf" and m.startswith("nqf.cli"))]
    # the package __init__ of a layer's parent is not an import of that layer: `nqf` (the public
    # surface) imports every layer, and only the CLI (above it) imports `nqf`
    assert not upward, "\n".join(upward)


def test_import_graph_has_no_cycle():
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(GRAPH[m]):
            if t == "nqf" or _is_parent(t, m):
                continue  # importing a package runs its __init__ first anyway: not an edge
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _is_parent(pkg: str, module: str) -> bool:
    return module.startswith(pkg + ".")


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

OLD_PATHS = {  # module path of nqf 0.1 -> a name it held
    "nqf.batches": "restrict", "nqf.cache": "enable_compilation_cache", "nqf.compress": "k_V",
    "nqf.data": "DenseData", "nqf.datasets": "fig3_data", "nqf.events": "Stop", "nqf.exact": "ExactGLVInterpolation",
    "nqf.extract": "extract", "nqf.flow": "rhs_glv_reduced", "nqf.gd": "gradient_descent",
    "nqf.glv": "orthogonal_features_residual", "nqf.ignition": "predicted_ignition_times", "nqf.io": "load",
    "nqf.kernels": "glv_rhs", "nqf.losses": "as_loss", "nqf.lsoda": "ReducedLSODAInterpolation",
    "nqf.map_sweep": "closed_sgd_sweep", "nqf.maps": "closed_sgd", "nqf.memory": "check",
    "nqf.model": "NQFModel", "nqf.modules": "MLP", "nqf.multilayer": "DeepNQF", "nqf.ntk": "ntk",
    "nqf.oracles": "theorem6", "nqf.powerlaw": "fit_power_law", "nqf.rosenbrock": "Rodas5P",
    "nqf.samplewise": "theorem4", "nqf.solve": "solve_flow", "nqf.spectral": "linearized",
    "nqf.stiff": "WoodburySolver", "nqf.structure": "mlp", "nqf.sweep": "solve_sweep",
    "nqf.validate": "validate", "nqf.wspace": "train_w", "nqf.experiments": "EXPERIMENTS", "nqf.cli": "main",
}


def test_every_top_level_name_of_0_1_is_still_there():
    assert not [n for n in OLD_TOP_LEVEL if not hasattr(nqf, n)]
    assert set(nqf.__all__) <= set(dir(nqf))


@pytest.mark.parametrize("path,name", sorted(OLD_PATHS.items()))
def test_old_module_paths_import(path, name):
    module = importlib.import_module(path)
    assert hasattr(module, name)
    leaf = path.split(".")[1]
    if leaf not in ("ntk", "extract"):  # in 0.1 too, nqf.ntk and nqf.extract were the functions
        assert getattr(nqf, leaf) is module
    exec(f"from {path} import {name}", {})


def test_pickles_naming_old_module_paths_load():
    """A result pickled by nqf 0.1 names its class by the old path (nqf.solve.FlowSolution)."""
    data = nqf.CommutingData([[1.0, 2.0]], [1.0])
    blob = pickle.dumps(data, protocol=0)  # text opcodes: the module path can be edited in place
    assert b"nqf.data._operators" in blob
    blob = blob.replace(b"nqf.data._operators", b"nqf.data")
    assert pickle.loads(blob).p == 2
    assert pickle.loads(pickle.dumps(nqf.structure.mlp)) is nqf.structure.mlp
