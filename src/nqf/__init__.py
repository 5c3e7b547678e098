"""nqf: training dynamics of Neural Quadratic Forms.

Near small initialization a layer of d interchangeable neurons is f_x(W) = Tr[W W^T A(x)]; its
training closes on the order parameters M = W W^T and mu = W 1 whatever the width. nqf builds
the data sets, solves the closed flows, and checks them against the paper's exact solutions.

**Layout** (each layer may import only the layers above it in this list):

- `nqf._core`: float64 policy, argument checks, memory estimates (`nqf.memory`), results on
  disk (`nqf.io`), the compilation cache;
- `nqf.data`: structured operators A, `NQFModel`, data sets (`nqf.datasets`), the architecture
  dictionary (`nqf.structure`), extraction, the layouts of users' modules (`nqf.Network`),
  W-space modules (`nqf.modules`);
- `nqf.dynamics`: losses, batches, vector fields, GLV equilibrium, closed maps, W-space
  training, multi-layer NQFs (`nqf.multilayer`);
- `nqf.solvers`: `solve_flow`, stiff solves (`nqf.stiff`, `nqf.rosenbrock`), the exact path
  (`nqf.exact`), sweeps, numba kernels (`nqf.kernels`);
- `nqf.theory`: oracles, sample-wise results (`nqf.samplewise`), ignition times, the flow's
  limit (`nqf.asymptote`), power laws (`nqf.powerlaw`), spectral view (`nqf.spectral`), NTK,
  compression (`nqf.compress`);
- `nqf.network`: your own network: `predict` its training, `record` it, `compare` them;
- `nqf.validate`: the theorem checks; `nqf.experiments`: the paper's figures; `nqf.cli`.

This module is the public surface: every name below is re-exported on purpose. Module paths of
nqf 0.1's flat layout (``nqf.solve``, ``nqf.maps``, ``nqf.oracles``, ...) still import: they
name the modules' new homes (CHANGELOG.md).

Importing nqf enables JAX float64 (see `nqf._core._config`) and is quick: the names below are
loaded when first used (``nqf.solve_flow`` imports `nqf.solvers` and the layers under it), so
``import nqf`` and the command line's ``nqf --help`` / ``nqf list`` do not import JAX. nqf's
persistent compilation cache is on by default (`nqf.enable_compilation_cache`;
``NQF_COMPILATION_CACHE=0`` turns it off).
"""

import importlib as _importlib
import importlib.abc as _abc
import os as _os
import sys as _sys
import types as _types
import typing as _typing

# float64 before anything computes: set now if JAX is already imported, else at its import.
if "jax" in _sys.modules:
    from ._core import _config

    del _config
else:
    _os.environ["JAX_ENABLE_X64"] = "1"  # read by jax's config at its import; nqf._core._config sets it again

from ._core._errors import AssumptionError, NQFWarning
from ._core._version import __version__  # noqa: F401  (nqf.__version__)

AssumptionError.__module__ = NQFWarning.__module__ = __name__  # pickles name nqf.AssumptionError

# name -> the module that defines or re-exports it; loaded on first use (PEP 562).
_NAMES = {
    "nqf._core._cache": "enable_compilation_cache",
    "nqf._core.io": "load save",
    "nqf.data": """AbstractCommutingData AbstractData BlockData CommutingData DenseData DiagonalData FeedForwardData
        He2Data LowRankData NQFModel feedforward_data datasets modules structure DegenerateWarning ExtractionError
        NormalizationError SmoothnessError SymmetryError ZGZWarning data_span extract extract_report k_V Network
        NeuronError PrecisionWarning""",
    "nqf.dynamics": """SGD Flow MapTrajectory PerSampleLoss WTrajectory batch_indices batch_weights closed_map closed_sgd
        excess_loss glv_equilibrium mse train_w multilayer ExactMap MapTerm map_term solve_modified_flow sgd_sde
        SDEPaths""",
    "nqf.dynamics.multilayer": "DeepNQF closed_deep_sgd compress_deep train_deep_w",
    "nqf.solvers": """SOLVERS FlowSolution GLVTrajectory MapSweep MaxStepsReached Stop SweepSolution
        closed_sgd_sweep glv_gd glv_rhs solve_flow solve_sweep distributed exact kernels rosenbrock stiff
        AbstractForm MForm FactorForm GLVForm ReducedGLVForm MMuForm AbstractBackend Exact LSODA CVODE PID Save
        SweepProgress SweepMemberError""",
    "nqf.theory": """Asymptote Compression OracleSolution PowerLawFit SampleOracleSolution asymptote
        compression_report corollary3 drop_times fit_power_law learning_phase_end linearized linearized_horizon
        measure_ignition_times measure_sample_ignition_times ntk plateau_levels predicted_ignition_times
        proposition7 sample_ignition_times samplewise_rates staircase_limit theorem3 theorem4 theorem5 theorem6
        theorem6_rates theorem7 theorem7_commuting theorem16 compress powerlaw samplewise spectral
        WidthRegime width_regime width_scaled_model ntk_drift sharpness stability_edge""",
    "nqf.network": """Comparison FrozenParameterWarning HorizonWarning InitScaleWarning Plan Prediction Recording compare
        plan predict record""",
}
_HOME = {name: module for module, names in _NAMES.items() for name in names.split()}
_LAYERS = ("data", "dynamics", "solvers", "theory", "network", "validate", "experiments", "cli")

# nqf 0.1's flat module paths -> their homes (CHANGELOG.md). `import nqf.solve` and
# `from nqf.oracles import theorem6` keep working, and so do pickles that name them.
_MOVED = {
    "batches": "nqf.dynamics._batches",
    "cache": "nqf._core._cache",
    "compress": "nqf.theory.compress",
    "datasets": "nqf.data.datasets",
    "events": "nqf.solvers._events",
    "exact": "nqf.solvers.exact",
    "extract": "nqf.data._extract",
    "flow": "nqf.dynamics._flow",
    "gd": "nqf.dynamics._gd",
    "glv": "nqf.dynamics._glv",
    "ignition": "nqf.theory._ignition",
    "io": "nqf._core.io",
    "kernels": "nqf.solvers.kernels",
    "losses": "nqf.dynamics._losses",
    "lsoda": "nqf.solvers._lsoda",
    "map_sweep": "nqf.solvers._map_sweep",
    "maps": "nqf.dynamics._maps",
    "memory": "nqf._core.memory",
    "model": "nqf.data._model",
    "modules": "nqf.data.modules",
    "multilayer": "nqf.dynamics.multilayer",
    "ntk": "nqf.theory._ntk",
    "oracles": "nqf.theory._oracles",
    "powerlaw": "nqf.theory.powerlaw",
    "rosenbrock": "nqf.solvers.rosenbrock",
    "samplewise": "nqf.theory.samplewise",
    "solve": "nqf.solvers._solve",
    "spectral": "nqf.theory.spectral",
    "stiff": "nqf.solvers.stiff",
    "structure": "nqf.data.structure",
    "sweep": "nqf.solvers._sweep",
    "wspace": "nqf.dynamics._wspace",
}


class _Alias(_abc.MetaPathFinder, _abc.Loader):
    """Import ``nqf.<old>`` (a key of `_MOVED`) as the module at its new home: the same module
    object (no second copy, so classes keep their identity), loaded only when asked for."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, leaf = fullname.rpartition(".")
        if package != __name__ or leaf not in _MOVED:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, self)

    def create_module(self, spec):
        module = _importlib.import_module(_MOVED[spec.name.rpartition(".")[2]])
        spec.loader_state = module.__spec__  # the import system sets module.__spec__ = spec next
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state  # keep the home's spec


if not any(isinstance(f, _Alias) for f in _sys.meta_path):
    _sys.meta_path.append(_Alias())


def __getattr__(name: str):
    """Load a public name, a layer, or a flat 0.1 module path on first use."""
    if name in _HOME:
        value = getattr(_importlib.import_module(_HOME[name]), name)
    elif name in _LAYERS:
        value = _importlib.import_module(f"{__name__}.{name}")
    elif name in _MOVED:
        value = _importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOME) | set(_LAYERS) | set(_MOVED))


class _Package(_types.ModuleType):
    """`nqf`'s module type: importing the flat 0.1 paths ``nqf.ntk`` and ``nqf.extract`` does not
    replace the functions `nqf.ntk` and `nqf.extract` by those modules (as in 0.1)."""

    def __setattr__(self, name, value):
        if name in ("ntk", "extract") and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package

__all__ = [
    # data
    "AbstractData",
    "AbstractCommutingData",
    "DenseData",
    "CommutingData",
    "DiagonalData",
    "BlockData",
    "LowRankData",
    "FeedForwardData",
    "He2Data",
    "feedforward_data",
    "NQFModel",
    "data_span",
    "k_V",
    "extract",
    "extract_report",
    "ExtractionError",
    "SymmetryError",
    "SmoothnessError",
    "NormalizationError",
    "ZGZWarning",
    "DegenerateWarning",
    # dynamics
    "SGD",
    "Flow",
    "PerSampleLoss",
    "mse",
    "batch_indices",
    "batch_weights",
    "excess_loss",
    "glv_equilibrium",
    "MapTrajectory",
    "closed_map",
    "closed_sgd",
    "ExactMap",
    "MapTerm",
    "map_term",
    "solve_modified_flow",
    "sgd_sde",
    "SDEPaths",
    "WTrajectory",
    "train_w",
    "DeepNQF",
    "closed_deep_sgd",
    "compress_deep",
    "train_deep_w",
    # solvers
    "solve_flow",
    "FlowSolution",
    "MaxStepsReached",
    "SOLVERS",
    "Stop",
    "solve_sweep",
    "SweepSolution",
    "SweepProgress",
    "SweepMemberError",
    "closed_sgd_sweep",
    "MapSweep",
    "GLVTrajectory",
    "glv_gd",
    "glv_rhs",
    "enable_compilation_cache",
    "AbstractForm",
    "MForm",
    "FactorForm",
    "GLVForm",
    "ReducedGLVForm",
    "MMuForm",
    "AbstractBackend",
    "Exact",
    "LSODA",
    "CVODE",
    "PID",
    "Save",
    # theory
    "AssumptionError",
    "NQFWarning",
    "OracleSolution",
    "theorem6",
    "theorem6_rates",
    "theorem7",
    "theorem7_commuting",
    "theorem16",
    "WidthRegime",
    "width_regime",
    "width_scaled_model",
    "ntk_drift",
    "proposition7",
    "SampleOracleSolution",
    "theorem4",
    "theorem5",
    "samplewise_rates",
    "sample_ignition_times",
    "measure_sample_ignition_times",
    "staircase_limit",
    "predicted_ignition_times",
    "measure_ignition_times",
    "Asymptote",
    "asymptote",
    "drop_times",
    "plateau_levels",
    "learning_phase_end",
    "ntk",
    "sharpness",
    "stability_edge",
    "PowerLawFit",
    "fit_power_law",
    "linearized",
    "linearized_horizon",
    "Compression",
    "theorem3",
    "corollary3",
    "compression_report",
    # your own network
    "Network",
    "NeuronError",
    "PrecisionWarning",
    "plan",
    "Plan",
    "predict",
    "Prediction",
    "record",
    "Recording",
    "compare",
    "Comparison",
    "FrozenParameterWarning",
    "HorizonWarning",
    "InitScaleWarning",
    # results on disk
    "save",
    "load",
    # public namespaces
    "datasets",
    "structure",
    "modules",
    "multilayer",
    "distributed",
    "exact",
    "kernels",
    "rosenbrock",
    "stiff",
    "compress",
    "powerlaw",
    "samplewise",
    "spectral",
    "validate",
    "memory",
    "io",
    # the layers
    "data",
    "dynamics",
    "solvers",
    "theory",
    "network",
]

if _typing.TYPE_CHECKING:  # for static readers (type checkers, the API reference's griffe): the lazy namespaces
    from ._core import io, memory
