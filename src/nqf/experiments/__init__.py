"""Reproductions of the paper's figures, one module per figure (layer 7 of nqf).

May import every lower layer (`nqf.data` ... `nqf.theory`, and `nqf.validate`'s error measures);
imported only by the CLI (`nqf reproduce`). `_common` holds what the figures share (JSON
records, checks and claims), `_pair` the module-vs-NQF training pairs of Figs. 2, 6, 7.

Each experiment is a function ``run(out_dir, quick=False) -> dict`` that writes
``out_dir/NAME.png`` and ``out_dir/NAME.json`` and returns the JSON dict. Every JSON has a
top-level ``"checks"`` list of ``{"name", "value", "bound", "passed"}`` records (measured vs
predicted numbers with their tolerance) plus the experiment's key numbers. ``quick=True``
reduces the work (coarser grids, smaller problems) but still runs every check.

`EXPERIMENTS` maps the names accepted by ``nqf reproduce NAME`` to these functions:

- ``fig2``: Fig. 2, module vs NQF for MLP, CNN, QK attention, MHA x GD, momentum, Adam
  (`nqf.experiments.fig2`).
- ``fig3``: Fig. 3 left/middle, sudden learning, flow vs Theorem 6 vs GD (`nqf.experiments.fig3`).
- ``fig3-powerlaw``: Fig. 3 right, the excess-loss power law and its slope
  (`nqf.experiments.fig3_powerlaw`).
- ``fig4``: Fig. 4, sample-wise sudden learning, flow vs Theorem 5 vs GD, t*_mu
  (`nqf.experiments.fig4`).
- ``fig4-powerlaw``: the sample-wise power law of Theorem 11 (E23) (`nqf.experiments.fig4_powerlaw`).
- ``fig5``: Fig. 5, power law of the Fourier MLP and its NQF vs (2 beta - 1)/(theta + beta), raw-input
  MLP baseline (`nqf.experiments.fig5`).
- ``fig6``: Fig. 6, online SGD teacher-student (MLP 20-100-1, QK attention) vs their NQFs: the step at
  which the trajectories separate (`nqf.experiments.fig6`).
- ``digits``: the Fig. 7 idea on scikit-learn's 8x8 digits (odd vs even): MLP, CNN, attention vs their
  NQFs with Adam full batch (`nqf.experiments.digits`; needs the ``digits`` extra).
- ``fig8``: Fig. 8, a 4-layer MLP and a 2-layer attention vs their 2-layer and 1-layer NQFs
  (Theorem 14; `nqf.experiments.fig8`).
- ``sample-scaling``: sample-size power laws of the spiked He2 model (issue 18): Y's eigenvectors
  against the BBP thresholds, the spectral estimator's exponent, the trained flow
  (`nqf.experiments.sample_scaling`).
- ``predict``: users' own equinox / flax.nnx modules on sklearn's digits, predicted by `nqf.predict`
  and measured by `nqf.record` (issue 23; `nqf.experiments.predict`; needs the ``digits`` extra).
- ``sgd-noise``: finite learning rates and minibatch noise (issue 24): the exact GD map (`nqf.ExactMap`) vs
  the flow vs the modified flow (orders in eta), the SGD SDE vs minibatch maps (weak error, ignition-time
  spread), on Fig. 3 data and an MLP's NQF (`nqf.experiments.sgd_noise`).
- ``moe``: the mixture of experts (Proposition 5) in the style of Fig. 2: the NQF's flow prediction vs
  the module trained by GD (loss over time, recovered singular values) at sigma = 0.01 / 0.2
  (`nqf.experiments.moe`).
- ``isotropic``: Theorem 7's sudden-learning branch (a = 2, C_k = 4c, V_k = g_k^2/(16c)) on isotropic
  data: ignition times vs E19, the power law, approximately isotropic data (issue 27;
  `nqf.experiments.isotropic`).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, MutableMapping
from pathlib import Path

__all__ = ["EXPERIMENTS", "TITLES", "run"]

# NAME -> module of this package: the registry. Each module defines NAME, TITLE and run.
_MODULES = {
    "fig2": "fig2",
    "fig3": "fig3",
    "fig3-powerlaw": "fig3_powerlaw",
    "fig4": "fig4",
    "fig4-powerlaw": "fig4_powerlaw",
    "fig5": "fig5",
    "fig6": "fig6",
    "digits": "digits",
    "fig8": "fig8",
    "sample-scaling": "sample_scaling",
    "sample-grid": "sample_grid",
    "predict": "predict",
    "sgd-noise": "sgd_noise",
    "moe": "moe",
    "isotropic": "isotropic",
}


class _Registry(MutableMapping):
    """A dict whose values are loaded on first access: ``EXPERIMENTS[name]`` imports that one
    figure's module (and JAX) only when it is run, so ``nqf list`` and ``nqf --help`` stay fast."""

    def __init__(self, load: Callable[[str], object]):
        self._load = load
        self._items: dict[str, object] = dict.fromkeys(_MODULES)

    def __getitem__(self, name):
        if self._items[name] is None:
            self._items[name] = self._load(name)
        return self._items[name]

    def __setitem__(self, name, value):
        self._items[name] = value

    def __delitem__(self, name):
        del self._items[name]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        return f"{type(self).__name__}({list(self._items)})"


def _run_of(name: str):
    return importlib.import_module(f"{__name__}.{_MODULES[name]}").run


def _title_of(name: str) -> str:
    """The module's ``TITLE``, read from its source (a string constant) without importing it."""
    tree = ast.parse((Path(__file__).parent / f"{_MODULES[name]}.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TITLE" for t in node.targets):
            return ast.literal_eval(node.value)
    return importlib.import_module(f"{__name__}.{_MODULES[name]}").TITLE


EXPERIMENTS: MutableMapping[str, Callable[..., dict]] = _Registry(_run_of)
"""Name -> ``run(out_dir, quick=False) -> dict`` for every reproducible figure (loaded on first use)."""

TITLES: MutableMapping[str, str] = _Registry(_title_of)
"""Name -> one-line description (shown by ``nqf list``)."""


def run(name: str, out_dir, quick: bool = False) -> dict:
    """Run the experiment `name` (a key of `EXPERIMENTS`) into `out_dir`; return its JSON dict.

    **Raises:** `KeyError` naming the valid names if `name` is unknown.
    """
    try:
        fn = EXPERIMENTS[name]
    except KeyError:
        raise KeyError(f"Unknown experiment {name!r}; valid names: {', '.join(sorted(EXPERIMENTS))}.") from None
    return fn(out_dir, quick=quick)
