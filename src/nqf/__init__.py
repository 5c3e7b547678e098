"""nqf: training dynamics of Neural Quadratic Forms.

Near small initialization a layer of d interchangeable neurons is f_x(W) = Tr[W W^T A(x)]; its
training closes on the order parameters M = W W^T and mu = W 1 whatever the width. nqf builds
the data sets, solves the closed flows, and checks them against the paper's exact solutions.

Importing nqf enables JAX float64 (see `nqf._config`).
"""

from . import _config  # noqa: F401  (enables float64 first)
from . import datasets
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
    feedforward_data,
)
from .glv import excess_loss, glv_equilibrium
from .model import NQFModel
from .ntk import ntk
from .losses import PerSampleLoss, mse
from .batches import batch_indices, batch_weights
from .maps import MapTrajectory, closed_map, closed_sgd
from .wspace import WTrajectory, train_w
from .ignition import measure_ignition_times, predicted_ignition_times
from .solve import SOLVERS, FlowSolution, MaxStepsReached, solve_flow
from .events import Stop  # stopping conditions of solve_flow (loss, ignition, user)
from .io import load, save  # results on disk (.npz + JSON header; nqf.io)
from . import memory  # memory estimated before it is allocated (NQF_MEMORY_BUDGET)
from .oracles import (
    AssumptionError,
    OracleSolution,
    proposition7,
    theorem6,
    theorem6_rates,
    theorem7,
    theorem7_commuting,
    theorem16,
)
from . import modules, structure  # the architecture dictionary (THEORY sec. 2) and W-space modules
from .extract import (DegenerateWarning, ExtractionError, NormalizationError, SmoothnessError, SymmetryError,
                      ZGZWarning, extract, extract_report)
from .samplewise import (
    SampleOracleSolution,
    measure_sample_ignition_times,
    sample_ignition_times,
    samplewise_rates,
    staircase_limit,
    theorem4,
    theorem5,
)
from .powerlaw import PowerLawFit, fit_power_law
from . import powerlaw, samplewise
from . import compress, multilayer  # Theorems 3, 15, Corollary 3 (E24); Theorem 14
from .compress import Compression, compression_report, corollary3, data_span, k_V, theorem3
from .multilayer import DeepNQF, closed_deep_sgd, compress_deep, train_deep_w
from . import validate  # the theorem checks behind `nqf validate`: nqf.validate.validate()
from . import kernels  # numba GLV kernels for very large p (issue 7); JAX reference inside
from .kernels import GLVTrajectory, glv_gd, glv_rhs
from .sweep import SweepSolution, solve_sweep  # batched sweeps (vmap, sharding over devices)
from .map_sweep import MapSweep, closed_sgd_sweep  # sweeps of the discrete maps (one compiled call)
from .cache import enable_compilation_cache  # JAX's persistent compilation cache (first-call latency)
from . import stiff  # structured linear solves (diagonal, Woodbury) for the stiff GLV path
from . import spectral  # the early-time power method and the spectral view of Y (issue 18)
from .spectral import linearized, linearized_horizon
from . import exact, rosenbrock  # Theorem 6 as a solve path; the Rodas5P stiff solver

__version__ = "0.1.0"
