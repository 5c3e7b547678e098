"""Memory estimated before it is allocated.

Every entry point that allocates saved states, trajectories, sweeps, a dense (m, p, p) tensor or
a solver's dense matrices estimates the bytes first (`estimate` helpers next to each entry point)
and calls `check(nbytes, what, ways_out)`, which raises `MemoryBudgetError` above the budget:

- the default budget is half of the memory available when the call is made (`MemAvailable` of
  /proc/meminfo on Linux; the physical memory elsewhere), and no more than half of what the
  process's address-space limit (``ulimit -v``) leaves above its current virtual size;
- ``NQF_MEMORY_BUDGET`` in the environment overrides it: a number of bytes with an optional unit
  (``"8GB"``, ``"512MiB"``, ``"2e9"``), a fraction of the available memory (``"0.8"``), or
  ``"off"`` to disable the check;
- the entry points take ``memory_budget=`` (bytes, or None for the default) for one call.

The estimate counts the arrays nqf itself creates (saved states, a solver's stage vectors and
Jacobian matrices, an interpolant reserved for `max_steps` steps), not JAX's workspace or the
user's own arrays, so it is a lower bound of the process's growth.
"""

from __future__ import annotations

import os
import re

__all__ = ["MemoryBudgetError", "budget", "check", "fmt_bytes"]

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


class MemoryBudgetError(MemoryError):
    """An nqf call would allocate more than the memory budget (`nqf.memory`).

    **Attributes:** `nbytes` (the estimate), `budget` (bytes), `what` (the allocation)."""

    def __init__(self, message: str, nbytes: float, budget: float, what: str):
        super().__init__(message)
        self.nbytes, self.budget, self.what = nbytes, budget, what


def fmt_bytes(n: float) -> str:
    """A byte count as text, e.g. '16.1 GB'."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _available() -> float:
    """The memory this process may still take: the machine's available memory, and no more than
    what its address-space limit (``ulimit -v``, `resource.RLIMIT_AS`) leaves above its current
    virtual size."""
    return min(_machine_available(), _address_space_left())


def _machine_available() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return float("inf")


def _address_space_left() -> float:
    """`RLIMIT_AS` minus the process's virtual size (VmSize of /proc/self/status); inf without a
    limit or where either cannot be read."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError, AttributeError):
        return float("inf")
    if limit in (resource.RLIM_INFINITY, -1):
        return float("inf")
    try:
        with open("/proc/self/status") as f:
            used = next((float(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")), 0.0)
    except OSError:
        used = 0.0
    return max(float(limit) - used, 0.0)


def budget(memory_budget=None) -> float:
    """The budget in bytes for one call: `memory_budget` if given, else ``NQF_MEMORY_BUDGET``,
    else half of the available memory (inf when disabled with ``"off"``).

    **Raises:** `ValueError` for an unreadable ``NQF_MEMORY_BUDGET`` or a `memory_budget` <= 0."""
    if memory_budget is not None:
        value = float(memory_budget)
        if not value > 0:
            raise ValueError(f"`memory_budget` must be a number of bytes > 0; found {memory_budget!r}.")
        return value
    text = os.environ.get("NQF_MEMORY_BUDGET", "").strip().lower()
    if not text:
        return 0.5 * _available()
    if text in ("off", "none", "inf"):
        return float("inf")
    match = re.fullmatch(r"([0-9.]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)", text)
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(
            f"NQF_MEMORY_BUDGET must be bytes with an optional unit ('8GB', '512MiB'), a fraction of "
            f"the available memory ('0.5'), or 'off'; found {os.environ['NQF_MEMORY_BUDGET']!r}."
        )
    value = float(match.group(1))
    if match.group(2) == "" and value <= 1.0:
        return value * _available()
    return value * _UNITS[match.group(2)]


_FLOOR = 64 * 2**20  # below this, the default budget is not looked up (a per-call cost)


def check(nbytes: float, what: str, ways_out: str, memory_budget=None) -> None:
    """Raise `MemoryBudgetError` naming the size, the budget and the ways out if `nbytes`
    exceeds the budget (see `budget`). Estimates under 64 MiB pass without reading the
    available memory unless a budget is set (argument or environment)."""
    if nbytes < _FLOOR and memory_budget is None and "NQF_MEMORY_BUDGET" not in os.environ:
        return
    limit = budget(memory_budget)
    if nbytes > limit:
        raise MemoryBudgetError(
            f"{what} would allocate about {fmt_bytes(nbytes)}, over the memory budget of "
            f"{fmt_bytes(limit)} (half the available memory by default; set NQF_MEMORY_BUDGET or "
            f"memory_budget= to change it). Ways out: {ways_out}",
            nbytes,
            limit,
            what,
        )
