"""Data: what a layer computes (layer 1 of nqf).

The structured operators A (`DenseData`, `CommutingData`, `DiagonalData`, `BlockData`,
`LowRankData`, `FeedForwardData`, `He2Data`; THEORY sec. 1-3) with their Y, K and traces, the
general model f_x = f0 + g^T mu + mu^T B mu + Tr[M A] (`NQFModel`, Eq. E2), the span V of the
structure components and k_V (Theorem 3), generated data sets (`nqf.datasets`), the
architecture dictionary (`nqf.structure`, THEORY sec. 2), extraction of A from any JAX function
(`extract`) and the weight-space modules (`nqf.modules`).

May import only `nqf._core`. Private modules: `_operators`, `_model`, `_span`, `_isotropic`
(Theorem 7's isotropy and the isotropic Riccati solution, shared by the data sets' population
flow and the oracle), `_extract`.
"""

from .._core._exports import publish as _publish
from ._operators import (
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
from ._model import NQFModel
from ._span import DEFAULT_RTOL, Span, data_span, helmert_rows, k_V, span_from_rows
from ._extract import (
    DegenerateWarning,
    ExtractionError,
    ExtractionReport,
    NormalizationError,
    SmoothnessError,
    SymmetryError,
    ZGZWarning,
    extract,
    extract_report,
    module_fn,
)
from ._network import Network, NeuronError, PrecisionWarning
from ._deep_network import DeepNetwork
from . import datasets, modules, structure

__all__ = [
    "AbstractData",
    "AbstractCommutingData",
    "DenseData",
    "CommutingData",
    "DiagonalData",
    "BlockData",
    "LowRankData",
    "FeedForwardData",
    "He2Data",
    "feedforward_data",
    "NQFModel",
    "DEFAULT_RTOL",
    "Span",
    "data_span",
    "k_V",
    "span_from_rows",
    "helmert_rows",
    "extract",
    "extract_report",
    "module_fn",
    "Network",
    "DeepNetwork",
    "NeuronError",
    "PrecisionWarning",
    "ExtractionReport",
    "ExtractionError",
    "SymmetryError",
    "SmoothnessError",
    "NormalizationError",
    "ZGZWarning",
    "DegenerateWarning",
    "datasets",
    "modules",
    "structure",
]

_publish(__name__, globals())  # pickles name nqf.data.CLASS, not the private module
