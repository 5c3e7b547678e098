"""The shared default instance of each diffrax solver class and its partition into arrays and
static parts, computed once: solvers are immutable, so every solve by name reuses them (and a
cache keyed on the solver, e.g. the memory estimate of `nqf.solvers._initial`, may hold them)."""

from __future__ import annotations

import diffrax
import equinox as eqx

_DEFAULT_SOLVERS: dict = {}  # class -> (shared default instance, its eqx.partition)


def _default_instance(cls) -> diffrax.AbstractSolver:
    """One shared default instance per solver class (solvers are immutable), so that its
    partition into arrays and static parts is computed once (`_partition_solver`)."""
    if cls not in _DEFAULT_SOLVERS:
        solver = cls()
        _DEFAULT_SOLVERS[cls] = (solver, eqx.partition(solver, eqx.is_array))
    return _DEFAULT_SOLVERS[cls][0]


def _partition_solver(solver) -> tuple:
    """(arrays, static) halves of `solver` (cached for the shared default instances)."""
    default = _DEFAULT_SOLVERS.get(type(solver))
    if default is not None and default[0] is solver:
        return default[1]
    return eqx.partition(solver, eqx.is_array)


def is_shared_default(solver) -> bool:
    """True if `solver` is the shared default instance of its class (`_default_instance`)."""
    default = _DEFAULT_SOLVERS.get(type(solver))
    return default is not None and default[0] is solver
