"""The error an oracle raises when its theorem's assumption fails on the given data, and the
base class of nqf's warnings."""

__all__ = ["AssumptionError", "NQFWarning"]


class NQFWarning(UserWarning):
    """Base class of every warning nqf issues (`nqf.HorizonWarning`, `nqf.PrecisionWarning`,
    `nqf.FrozenParameterWarning`, `nqf.ZGZWarning`, `nqf.DegenerateWarning`, ...): filter them all
    with ``warnings.filterwarnings("error", category=nqf.NQFWarning)`` (nqf's own test suite does)."""


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
