"""The error an oracle raises when its theorem's assumption fails on the given data, and the
base class of nqf's warnings."""

import re

__all__ = ["AssumptionError", "MaxStepsReached", "NQFWarning"]

# The exception types nqf's host callbacks raise inside compiled code (`jax.pure_callback`): JAX
# reports them as `jax.errors.JaxRuntimeError` with the callback's traceback as text.
_CALLBACK_TYPES = {"FloatingPointError": FloatingPointError, "ValueError": ValueError, "IndexError": IndexError}
_CALLBACK_LINE = re.compile(r"^(FloatingPointError|ValueError|IndexError): (.+)$", re.MULTILINE)


class NQFWarning(UserWarning):
    """Base class of every warning nqf issues (`nqf.HorizonWarning`, `nqf.PrecisionWarning`,
    `nqf.FrozenParameterWarning`, `nqf.ZGZWarning`, `nqf.DegenerateWarning`, ...): filter them all
    with ``warnings.filterwarnings("error", category=nqf.NQFWarning)`` (nqf's own test suite does)."""


class MaxStepsReached(RuntimeError):
    """The solver used up `max_steps` before reaching `t1` (defined here, below the solvers, so
    that `nqf.solve_modified_flow` in the dynamics layer raises it too).

    **Attributes:** `t_reached` (the gradient-flow time it got to) and `solution` (a
    `FlowSolution` with the saved times up to `t_reached`, or None)."""

    def __init__(self, message: str, t_reached: float | None = None, solution=None):
        super().__init__(message)
        self.t_reached, self.solution = t_reached, solution


class AssumptionError(ValueError):
    """An oracle's assumption does not hold on the given data (or initial condition).

    **Attributes:**

    - `theorem`: the result whose assumption failed, e.g. ``"Theorem 6"``.
    - `condition`: the violated condition in words, prefixed with the theorem, e.g.
      ``"Theorem 6: orthogonal features sum_mu lambda_{mu,k} lambda_{mu,j} = 0 (k != j)"``.
    - `residual`: the measured relative residual of that condition (float).
    - `tol`: the tolerance it was compared with (float).
    - `where`: where the worst violation sits (e.g. ``"(k, j) = (0, 1)"``), or ``""``.
    """

    def __init__(self, theorem: str, condition: str, residual: float, tol: float, where: str = "", detail: str = ""):
        self._args = (theorem, condition, residual, tol, where, detail)
        self.theorem = theorem
        self.condition = f"{theorem}: {condition}"
        self.residual = float(residual)
        self.tol = float(tol)
        self.where = where
        msg = (
            f"{theorem} does not apply to this data: its assumption '{condition}' fails"
            + (f" at {where}" if where else "")
            + f"; relative residual {self.residual:.3g} > tol {self.tol:.3g}."
            + (f" {detail}" if detail else "")
        )
        super().__init__(msg)

    def __reduce__(self):  # pickles (e.g. across a process pool) with the arguments it was built from
        return type(self), self._args


def raised_in_callback(err: BaseException, where: str = "") -> BaseException | None:
    """The documented exception an nqf host callback raised inside compiled code, rebuilt from the
    `jax.errors.JaxRuntimeError` ("INTERNAL: CpuCallback error ...") that JAX reports it as: the
    type and message of the callback's last ``FloatingPointError`` / ``ValueError`` /
    ``IndexError`` line, prefixed with `where` (e.g. ``"MapTerm.solve: "``), the JAX error
    chained by the caller (``raise new from err``). None when `err` carries no such line.

    Used at the public boundary of functions whose compiled core checks at run time; under a
    user's own `jax.jit` the error surfaces outside nqf's code and stays JAX's (docs/numerics.md)."""
    found = _CALLBACK_LINE.findall(str(err))
    if not found:
        return None
    name, message = found[-1]
    return _CALLBACK_TYPES[name](where + message)
