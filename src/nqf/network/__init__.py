"""Your own network: predict its training from its NQF, record it, compare (layer 5 of nqf).

`nqf.plan` checks a run before it starts (stability edge, horizon, init size); `nqf.predict`
extracts the NQF of a user's module (equinox, flax.nnx, or a plain JAX function, located by
`nqf.Network`) and solves its training in advance; `nqf.record` trains the module
itself with any optax optimizer and records the same order parameters; `nqf.compare` measures
the agreement, the ignition and drop times, and when the network leaves the NQF.

May import `nqf._core`, `nqf.data`, `nqf.dynamics`, `nqf.solvers` and `nqf.theory`. Private
modules: `_inputs`, `_plan`, `_predict`, `_events`, `_departure`, `_record`, `_compare`, `_heldout` (held-out data),
`_plot`, `_deep` (deep networks: the multi-layer NQF).
"""

from .._core._exports import publish as _publish
from ._compare import Comparison, compare
from ._deep import DeepPrediction
from ._plan import Plan, plan
from ._predict import FrozenParameterWarning, HorizonWarning, InitScaleWarning, Prediction, predict
from ._record import Recording, record

__all__ = [
    "Plan",
    "plan",
    "Prediction",
    "DeepPrediction",
    "predict",
    "Recording",
    "record",
    "Comparison",
    "compare",
    "FrozenParameterWarning",
    "HorizonWarning",
    "InitScaleWarning",
]

_publish(__name__, globals())
