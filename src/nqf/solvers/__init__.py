"""Solvers: the closed flow solved in time (layer 3 of nqf).

`solve_flow` (the diffrax front end, Eqs. E8-E13; explicit, stiff Rosenbrock/Kvaerno with
structured Newton solves (`nqf.stiff`), scipy LSODA and SUNDIALS CVODE for the reduced GLV
form, and Theorem 6's exact solution as a solve path (`nqf.exact`)), stopping conditions
(`Stop`), batched sweeps of flows and maps (vmap, sharding over devices), and the numba GLV
kernels for very large p (`nqf.kernels`). Times are gradient-flow times t = eta * steps.

May import `nqf._core`, `nqf.data` and `nqf.dynamics`. Private modules: `_solve`, `_events`,
`_lsoda`, `_sweep`, `_map_sweep`, `_digest` (one argument encoding for hashing), and the pieces of one solve core (issue 25): `_forms` (the
forms as strategy objects), `_spec` (controller, save specification, adjoint, keyword aliases),
`_backends` (Exact, LSODA, CVODE), `_initial` (checks of the inputs), `_core` (the compiled
solve), `_solution` (`FlowSolution`); issue 26: `_distributed` (sweeps across the processes of a `jax.distributed` cluster:
placement, gathering, the argument check), `_checkpoint` (chunked sweeps saved and resumed)
and `_executor` (host-solver sweeps through a `concurrent.futures.Executor`).
Public module `distributed`: `initialize`, `launch_local`, `free_port`, `shard_modes`.
"""

from .._core._exports import publish as _publish
from ._solve import SOLVERS, FlowSolution, MaxStepsReached, solve_flow
from ._events import Stop
from ._sweep import SweepSolution, solve_sweep
from ._map_sweep import MapSweep, closed_sgd_sweep
from ._checkpoint import SweepProgress
from ._executor import SweepMemberError
from .kernels import GLVTrajectory, glv_gd, glv_rhs
from ._forms import AbstractForm, FactorForm, GLVForm, MForm, MMuForm, ReducedGLVForm
from ._backends import CVODE, LSODA, AbstractBackend, Exact
from ._spec import PID, Save
from .rosenbrock import Rodas5P
from . import distributed, exact, kernels, rosenbrock, stiff

__all__ = [
    "solve_flow",
    "FlowSolution",
    "MaxStepsReached",
    "SOLVERS",
    "Stop",
    "solve_sweep",
    "SweepSolution",
    "closed_sgd_sweep",
    "MapSweep",
    "SweepProgress",
    "SweepMemberError",
    "GLVTrajectory",
    "glv_gd",
    "glv_rhs",
    "Rodas5P",
    "distributed",
    "exact",
    "kernels",
    "rosenbrock",
    "stiff",
    # issue 25: the objects of one solve core (forms, backends, controller, save specification)
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
]

_publish(__name__, globals())  # pickles name nqf.solvers.CLASS, not the private module
