"""Validation: the theorem checks behind `nqf validate` (layer 6 of nqf; see the package layout).

May import every lower layer (`nqf.data`, `nqf.dynamics`, `nqf.solvers`, `nqf.theory`); imported
by `nqf.experiments` and the CLI. One private module per family of checks: `_flow` (flow vs the
exact solutions, refusals, NTK, general model, dictionary), `_theorem2` (closed maps vs weight
space), `_samplewise` (Theorems 4, 5, 10, 11), `_gaps` (Eq. 40),
`_weight_decay` (the weight-decay threshold), `_compress` (Theorems 3, 14, 15, Corollary 3),
`_regime` (Proposition 9), `_isotropic` (Theorem 7's ignition and power law, approximately
isotropic data), `_deeplinear` (Theorem 16, App. B.7), `_moe` (Proposition 5); the
registry, records, error measures and the runner live in `_common`. Importing this package
registers the built-in checks in that order.

`validate` runs every check in the registry `CHECKS` and returns one record per measurement:
``{"name": str, "value": float, "bound": float, "passed": bool}``. The built-in checks

- integrate the flow (`nqf.solve_flow`) on generated data that satisfies Theorem 6, Theorem 7,
  Theorem 16 and Proposition 7, for each initial scale eps, and record the maximum relative error
  against the oracle over the whole trajectory (bound `FLOW_BOUND` = 1e-8);
- give each oracle a data set that violates its assumption and record the measured residual
  (bound: the oracle's `tol`); the check passes if the oracle refused with `AssumptionError`;
- compare the NTK of Proposition 8 (`nqf.ntk`, Eq. E25) with J J^T of the weight-space model by
  autodiff (bound `NTK_BOUND` = 1e-12), and the (M, mu) flow of the general model (Eq. E10) with
  the weight-space gradient flow W' = -grad_W L integrated by scipy (bound `FLOW_BOUND`);
- compare the closed discrete maps of Theorem 2 / Corollary 2 (`nqf.closed_map`) with weight-space
  training (`nqf.train_w`): full batch, minibatches with shared indices, weight decay, heavy-ball
  and Nesterov momentum, plain and general (g, B, f0) models (bound 1e-10,
  `nqf.validate._theorem2`);
- check discrete training as diffrax problems: the exact map as a diffrax solver (`nqf.ExactMap`)
  against `nqf.closed_sgd` step by step and at a Stop event, the orders in eta (1 and 2) of the
  flow and of the finite-lr modified flow against GD, and the SGD SDE's one-step moments against
  the enumerated minibatch map (`nqf.validate._discrete`);
- check Theorems 4 and 5 (sample-wise oracles against the flow, and their refusals), Theorem
  10's staircase limit at eps = 1e-3..1e-12 with a flow (distance within 2x its leading order)
  and Theorem 11's sample-wise power law with a flow (m = 200; `nqf.validate._samplewise`);
- check Eq. 40, the diverging gaps between ignition times, on flows at eps = 1e-3..1e-12
  (`nqf.validate._gaps`);
- check weight decay's stability threshold (nqf's penalty gamma/2 |W|^2: modes with
  r_k < 2 gamma never ignite, those above do; GD and the flow against Theorem 6 and E19 with
  weight decay; `nqf.validate._weight_decay`);
- check compression and multi-layer NQFs: Theorem 3 and Corollary 3 (compressed vs original
  training), Theorems 14 and 15 (closed deep maps vs weight space, per-layer compression;
  `nqf.validate._compress`);
- check Theorem 16's deep-linear-network instance (App. B.7): the flow, the Theorem 16 oracle,
  Saxe et al. (2014) Eq. 12 and the two-layer linear network W2 W1 trained in weight space
  (gradient flow and GD) (`nqf.validate._deeplinear`);
- check the mixture of experts (Proposition 5): closed-form A vs autodiff, the module vs its NQF
  near small initialization, the module's GD vs the NQF's closed map and closed flow
  (`nqf.validate._moe`);
- check Proposition 9: the NTK drift of the (M, mu) flow over widths d = 10..10^4 against the
  exponent of the width scaling (`nqf.validate._regime`);
- check Theorem 7's sudden-learning branch (a = 2, C_k = 4 c, V_k = g_k^2 / (16 c)) on isotropic
  data: ignition times vs E19 (0.1 %), the excess-loss formula, the power-law exponent vs E22,
  and the oracle's error on approximately isotropic data against the isotropy residual
  (`nqf.validate._isotropic`).

Extending: append a function ``check(eps_values: tuple[float, ...]) -> list[dict]`` to `CHECKS`
(or decorate it with `register`); build records with `record`. A check that raises is reported as
one failed record naming the exception, so one broken check never hides the others.

Error measures (all maxima over the saved times):

- `relative_error(x, ref)`: max |x - ref| / |ref| elementwise (mode strengths z).
- `matrix_relative_error(M, ref)`: max_ij |M_ij - ref_ij| / sqrt(ref_ii ref_jj), the entrywise
  error in the natural scale of a PSD matrix (small modes keep their own scale); for matrices in
  the basis where they are computed.
- `norm_relative_error(M, ref)`: max_t |M(t) - ref(t)|_F / |ref(t)|_F (basis-independent; used
  where the flow's state mixes modes of very different size, e.g. a rotated basis).
"""

from . import _common
from ._common import (
    CHECKS,
    FLOW_BOUND,
    NTK_BOUND,
    THM6_C,
    THM6_R,
    generic_commuting_data,
    matrix_relative_error,
    norm_relative_error,
    record,
    register,
    relative_error,
    validate,
)
from . import _flow, _theorem2, _discrete, _samplewise, _gaps, _weight_decay, _compress  # register, in this order
from . import _regime, _isotropic, _deeplinear, _moe  # register after the built-in checks above
from ._compress import check_corollary3, check_theorem3, check_theorem14, check_theorem15
from ._flow import (
    DICTIONARY_BOUND,
    check_dictionary_vs_autodiff,
    check_flow_general,
    check_ntk,
    check_proposition7,
    check_refusals,
    check_theorem6,
    check_theorem7,
    check_theorem16,
)
from ._samplewise import check_samplewise_powerlaw_flow, check_samplewise_staircase, check_theorem4, check_theorem5
from ._gaps import check_diverging_gaps
from ._theorem2 import check_theorem2
from ._weight_decay import check_weight_decay_threshold
from ._regime import check_proposition9
from ._isotropic import check_isotropic_approximate, check_isotropic_ignition, check_isotropic_powerlaw
from ._discrete import check_exact_map_solver, check_modified_flow, check_sgd_sde_moments
from ._deeplinear import check_deep_linear
from ._moe import check_moe

__all__ = [*_common.__all__, "DICTIONARY_BOUND"]
