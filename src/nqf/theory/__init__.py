"""Theory: the paper's exact results as functions (layer 4 of nqf).

Exact oracles (Theorems 6, 7, 16, Proposition 7), the sample-wise oracles and staircase
(Theorems 4, 5, 10; `nqf.samplewise`), ignition times (E19, predicted and measured), the flow's
limit t -> inf (`asymptote`) and loss-curve times (`drop_times`, `plateau_levels`,
`learning_phase_end`), scaling
exponents and the power-law fitter (E21-E23; `nqf.powerlaw`), the early-time spectral view
(`nqf.spectral`), the NTK (Proposition 8, E25), the sharpness of the loss and the stability edge of its map, the lazy / feature-learning regime from the
width exponents and the measured NTK drift of a flow (Proposition 9) and compression (Theorem 3, Corollary 3;
`nqf.compress`). An oracle whose assumption fails raises `AssumptionError` naming it and the
measured residual.

May import `nqf._core`, `nqf.data`, `nqf.dynamics` and `nqf.solvers` (the measured ignition
times read flow solutions). Private modules: `_oracles`, `_ignition`, `_asymptote`, `_ntk`, `_regime`, `_sharpness`.
"""

from .._core._exports import publish as _publish
from .._core._errors import AssumptionError, NQFWarning
from ._oracles import (
    OracleSolution,
    isotropy,
    logistic,
    proposition7,
    sym_basis,
    theorem6,
    theorem6_rates,
    theorem7,
    theorem7_commuting,
    theorem16,
)
from ._asymptote import Asymptote, asymptote
from ._ignition import drop_times, learning_phase_end, measure_ignition_times, plateau_levels, predicted_ignition_times
from ._ntk import ntk
from ._sharpness import sharpness, stability_edge
from ._regime import WidthRegime, ntk_drift, width_regime, width_scaled_model
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
from .spectral import linearized, linearized_horizon
from .compress import Compression, compression_report, corollary3, theorem3
from . import compress, powerlaw, samplewise, spectral

__all__ = [
    "AssumptionError",
    "NQFWarning",
    "OracleSolution",
    "theorem6",
    "theorem6_rates",
    "theorem7",
    "theorem7_commuting",
    "theorem16",
    "proposition7",
    "logistic",
    "isotropy",
    "sym_basis",
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
    "WidthRegime",
    "width_regime",
    "width_scaled_model",
    "ntk_drift",
    "SampleOracleSolution",
    "theorem4",
    "theorem5",
    "samplewise_rates",
    "sample_ignition_times",
    "measure_sample_ignition_times",
    "staircase_limit",
    "PowerLawFit",
    "fit_power_law",
    "linearized",
    "linearized_horizon",
    "Compression",
    "theorem3",
    "corollary3",
    "compression_report",
    "compress",
    "powerlaw",
    "samplewise",
    "spectral",
]

_publish(__name__, globals())  # pickles name nqf.theory.CLASS, not the private module
