"""Reproductions of the paper's figures, one module per figure.

Each experiment is a function ``run(out_dir, quick=False) -> dict`` that writes
``out_dir/NAME.png`` and ``out_dir/NAME.json`` and returns the JSON dict. Every JSON has a
top-level ``"checks"`` list of ``{"name", "value", "bound", "passed"}`` records (measured vs
predicted numbers with their tolerance) plus the experiment's key numbers. ``quick=True``
reduces the work (coarser grids, smaller problems) but still runs every check.

`EXPERIMENTS` maps the names accepted by ``nqf reproduce NAME`` to these functions:

- ``fig3``: Fig. 3 left/middle, sudden learning, flow vs Theorem 6 vs GD (`nqf.experiments.fig3`).
- ``fig3-powerlaw``: Fig. 3 right, the excess-loss power law and its slope
  (`nqf.experiments.fig3_powerlaw`).
"""

from __future__ import annotations

from collections.abc import Callable

from . import fig3, fig3_powerlaw

__all__ = ["EXPERIMENTS", "TITLES", "run"]

EXPERIMENTS: dict[str, Callable[..., dict]] = {
    fig3.NAME: fig3.run,
    fig3_powerlaw.NAME: fig3_powerlaw.run,
}
"""Name -> ``run(out_dir, quick=False) -> dict`` for every reproducible figure."""

TITLES: dict[str, str] = {
    fig3.NAME: fig3.TITLE,
    fig3_powerlaw.NAME: fig3_powerlaw.TITLE,
}
"""Name -> one-line description (shown by ``nqf list``)."""


def run(name: str, out_dir, quick: bool = False) -> dict:
    """Run the experiment `name` (a key of `EXPERIMENTS`) into `out_dir`; return its JSON dict.

    **Raises:** `KeyError` naming the valid names if `name` is unknown.
    """
    try:
        fn = EXPERIMENTS[name]
    except KeyError:
        raise KeyError(
            f"Unknown experiment {name!r}; valid names: {', '.join(sorted(EXPERIMENTS))}."
        ) from None
    return fn(out_dir, quick=quick)
