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

Importing nqf enables JAX float64 (see `nqf._core._config`).
"""

import importlib as _importlib
import sys as _sys

from ._core import _config  # noqa: F401  (enables float64 first)

del _config  # private: nqf._core._config
from ._core import io, memory  # results on disk (.npz + JSON header); memory estimated before allocation
from ._core._cache import enable_compilation_cache  # JAX's persistent compilation cache (first-call latency)
from ._core._errors import AssumptionError
from ._core._exports import publish as _publish
from ._core._version import __version__
from ._core.io import load, save
from .data import (
    AbstractCommutingData,
    AbstractData,
    BlockData,
    CommutingData,
    DenseData,
    DiagonalData,
    FeedForwardData,
    He2Data,
    LowRankData,
    NQFModel,
    feedforward_data,
)
from .data import datasets, modules, structure  # generated data sets; the architecture dictionary (THEORY sec. 2)
from .data import (DegenerateWarning, ExtractionError, NormalizationError, SmoothnessError, SymmetryError,
                   ZGZWarning, data_span, extract, extract_report, k_V)
from .dynamics import (
    MapTrajectory,
    PerSampleLoss,
    WTrajectory,
    batch_indices,
    batch_weights,
    closed_map,
    closed_sgd,
    excess_loss,
    glv_equilibrium,
    mse,
    train_w,
)
from .dynamics import multilayer  # Theorem 14, 15
from .dynamics.multilayer import DeepNQF, closed_deep_sgd, compress_deep, train_deep_w
from .solvers import (
    SOLVERS,
    FlowSolution,
    GLVTrajectory,
    MapSweep,
    MaxStepsReached,
    Stop,
    SweepSolution,
    closed_sgd_sweep,
    glv_gd,
    glv_rhs,
    solve_flow,
    solve_sweep,
)
from .solvers import exact, kernels, rosenbrock, stiff  # Theorem 6 as a solve path; numba; Rodas5P; Newton solves
from .theory import (
    Asymptote,
    Compression,
    OracleSolution,
    PowerLawFit,
    SampleOracleSolution,
    asymptote,
    compression_report,
    corollary3,
    drop_times,
    fit_power_law,
    learning_phase_end,
    linearized,
    linearized_horizon,
    measure_ignition_times,
    measure_sample_ignition_times,
    ntk,
    plateau_levels,
    predicted_ignition_times,
    proposition7,
    sample_ignition_times,
    samplewise_rates,
    staircase_limit,
    theorem3,
    theorem4,
    theorem5,
    theorem6,
    theorem6_rates,
    theorem7,
    theorem7_commuting,
    theorem16,
)
from .theory import compress, powerlaw, samplewise, spectral  # Theorems 3, Cor. 3; E21-E23; Theorems 4, 5, 10; E15
from . import data, dynamics, solvers, theory, network  # noqa: E402  (the layers, for `from nqf import *`)
from .data import Network, NeuronError, PrecisionWarning  # a user's module with its neurons located
from .network import (Comparison, FrozenParameterWarning, HorizonWarning, Prediction, Recording, compare, predict,
                      record)
from . import validate  # the theorem checks behind `nqf validate`: nqf.validate.validate()

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
for _old, _new in _MOVED.items():
    _sys.modules.setdefault(f"{__name__}.{_old}", _importlib.import_module(_new))
del _old, _new


def __getattr__(name: str):
    """``nqf.maps`` and the other flat module paths of `_MOVED` as attributes (after ``import nqf``)."""
    if name in _MOVED:
        return _sys.modules[f"{__name__}.{name}"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    # data
    "AbstractData", "AbstractCommutingData", "DenseData", "CommutingData", "DiagonalData", "BlockData",
    "LowRankData", "FeedForwardData", "He2Data", "feedforward_data", "NQFModel", "data_span", "k_V",
    "extract", "extract_report", "ExtractionError", "SymmetryError", "SmoothnessError", "NormalizationError",
    "ZGZWarning", "DegenerateWarning",
    # dynamics
    "PerSampleLoss", "mse", "batch_indices", "batch_weights", "excess_loss", "glv_equilibrium",
    "MapTrajectory", "closed_map", "closed_sgd", "WTrajectory", "train_w",
    "DeepNQF", "closed_deep_sgd", "compress_deep", "train_deep_w",
    # solvers
    "solve_flow", "FlowSolution", "MaxStepsReached", "SOLVERS", "Stop", "solve_sweep", "SweepSolution",
    "closed_sgd_sweep", "MapSweep", "GLVTrajectory", "glv_gd", "glv_rhs", "enable_compilation_cache",
    # theory
    "AssumptionError", "OracleSolution", "theorem6", "theorem6_rates", "theorem7", "theorem7_commuting",
    "theorem16", "proposition7", "SampleOracleSolution", "theorem4", "theorem5", "samplewise_rates",
    "sample_ignition_times", "measure_sample_ignition_times", "staircase_limit", "predicted_ignition_times",
    "measure_ignition_times", "Asymptote", "asymptote", "drop_times", "plateau_levels", "learning_phase_end",
    "ntk", "PowerLawFit", "fit_power_law", "linearized", "linearized_horizon",
    "Compression", "theorem3", "corollary3", "compression_report",
    # your own network
    "Network", "NeuronError", "PrecisionWarning", "predict", "Prediction", "record", "Recording", "compare",
    "Comparison", "FrozenParameterWarning", "HorizonWarning",
    # results on disk
    "save", "load",
    # public namespaces
    "datasets", "structure", "modules", "multilayer", "exact", "kernels", "rosenbrock", "stiff", "compress",
    "powerlaw", "samplewise", "spectral", "validate", "memory", "io",
    # the layers
    "data", "dynamics", "solvers", "theory", "network",
]

# -- issue 25: the objects of one solve core (forms, backends, step-size controller, save spec) --
from .solvers import (  # noqa: E402
    CVODE, LSODA, PID, AbstractBackend, AbstractForm, Exact, FactorForm, GLVForm, MForm, MMuForm, ReducedGLVForm,
    Save,
)

__all__ += ["AbstractForm", "MForm", "FactorForm", "GLVForm", "ReducedGLVForm", "MMuForm", "AbstractBackend",
            "Exact", "LSODA", "CVODE", "PID", "Save"]
# -- end issue 25 --

_publish(__name__, globals())  # pickles name nqf.AssumptionError, not nqf._core._errors
