"""Dynamics: how a layer trains (layer 2 of nqf).

Losses, minibatches, the vector fields of the closed flow on (M, mu) (THEORY sec. 4-5: the
"M", "factor", "glv" and "M-mu" forms, Eqs. E8-E13), the GLV equilibrium and excess loss, the
exact closed SGD maps (Theorem 2, Corollary 2) and the same maps as a diffrax solver (`ExactMap`,
`map_term`), the modified (finite learning rate) flow (`rhs_M_modified`, `rhs_M_mu_modified`,
`solve_modified_flow`), minibatch SGD as a closed SDE on (M, mu) (`sgd_sde`), weight-space training (the reference they are
tested against), plain gradient descent on the GLV form, and multi-layer NQFs (`nqf.multilayer`,
Theorems 14, 15). Time is gradient-flow time t = eta * steps.

May import `nqf._core` and `nqf.data`. Private modules: `_losses`, `_training`, `_batches`, `_flow`, `_glv`,
`_maps`, `_map_solver`, `_modified`, `_wspace`, `_gd`, `_train_args`, `_sde`.
"""

from .._core._exports import publish as _publish
from ._losses import PerSampleLoss, as_loss, mse
from ._training import SGD, Flow
from ._batches import batch_indices, batch_weights, check_batch_indices, restrict
from ._flow import (
    FORMS,
    RHS,
    glv_z,
    jac_glv_reduced,
    reduced_log_z,
    rhs_factor,
    rhs_glv,
    rhs_glv_reduced,
    rhs_M,
    rhs_M_mu,
)
from ._glv import excess_loss, glv_equilibrium, logistic_log_z, logistic_z, orthogonal_features_residual
from ._maps import MapTrajectory, closed_map, closed_sgd, gradient_terms
from ._map_solver import ExactMap, MapTerm, map_term
from ._modified import modified_objective, rhs_M_modified, rhs_M_mu_modified, solve_modified_flow
from ._wspace import WTrajectory, train_w, w_objective
from ._gd import gradient_descent
from ._sde import SDEPaths, batch_weight_covariance, sde_coefficients, sgd_sde
from . import multilayer

__all__ = [
    "SGD",
    "Flow",
    "PerSampleLoss",
    "mse",
    "as_loss",
    "batch_indices",
    "batch_weights",
    "check_batch_indices",
    "restrict",
    "FORMS",
    "RHS",
    "rhs_M",
    "rhs_factor",
    "rhs_glv",
    "rhs_glv_reduced",
    "jac_glv_reduced",
    "rhs_M_mu",
    "reduced_log_z",
    "glv_z",
    "glv_equilibrium",
    "excess_loss",
    "orthogonal_features_residual",
    "logistic_z",
    "logistic_log_z",
    "MapTrajectory",
    "closed_map",
    "closed_sgd",
    "gradient_terms",
    "ExactMap",
    "MapTerm",
    "map_term",
    "rhs_M_modified",
    "rhs_M_mu_modified",
    "modified_objective",
    "solve_modified_flow",
    "WTrajectory",
    "train_w",
    "w_objective",
    "gradient_descent",
    "SDEPaths",
    "sgd_sde",
    "sde_coefficients",
    "batch_weight_covariance",
    "multilayer",
]

_publish(__name__, globals())  # pickles name nqf.dynamics.CLASS, not the private module
