"""Shared plumbing of the figure reproductions: check and claim records, JSON output, figure style.

Every reproduction JSON separates two questions:

- ``checks`` (`check`): the package's own correctness (flow vs oracle, closed map vs W-space,
  fitter on exact power laws, module vs NQF at leading order at init, ...). They alone decide
  the exit status of ``nqf reproduce``.
- ``claims`` (`claim`): each quantitative claim of the paper that the figure tests, with its
  metric, measured value, criterion and verdict ("reproduced", "not reproduced", "not expected
  at this setting"), whether it was measured at the paper's setting or at one the package chose,
  and why. A claim that does not hold is a result, not an error: it changes the exit status
  only under ``nqf reproduce --strict-claims``.

Beside them, ``chosen_settings`` (`chosen`) lists every setting the paper leaves unstated that
the package chose, and ``sensitivity`` (`sensitivity`) holds the same claims measured at the
literal reading of the paper in the same full run (quick runs skip it and say so).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

# One color per mode, in the order of matplotlib's default cycle (as in the paper's figures).
COLORS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:gray",
    "tab:olive",
    "tab:cyan",
)


def check(name: str, value, bound) -> dict:
    """One check record ``{"name", "value", "bound", "passed"}``; passed iff value <= bound
    (False for a NaN value)."""
    value = float(value)
    bound = float(bound)
    return {"name": name, "value": value, "bound": bound, "passed": bool(value <= bound)}


VERDICTS = ("reproduced", "not reproduced", "not expected at this setting")
"""The verdicts of a claim record."""

SETTINGS = ("paper", "package-chosen")
"""Where a claim was measured: at the paper's stated setting, or at one the package chose."""

REVISED = "revised criterion"
"""`claim`'s ``criterion_kind`` for a metric and criterion fixed in issue 15 before measuring (they
replace an earlier check of the same claim); otherwise ``"stated criterion"``."""


def claim(
    name: str,
    text: str,
    section: str,
    *,
    metric: str,
    value,
    criterion: str,
    holds: bool,
    setting: str,
    why: str,
    expected: bool = True,
    revised: bool = False,
) -> dict:
    """One claim record of a reproduction (module docstring).

    **Arguments:**

    - `name`: a short unique label (shown in the CLI's claims table), e.g. ``"fig2 MLP gd
      sigma=0.01: tracks"``; `text`: the paper's claim, quoted or paraphrased; `section`: where
      the paper makes it (e.g. ``"Sec. 7, Fig. 2"``).
    - `metric`: what is measured, in words (with units; time is gradient-flow time t = eta *
      steps unless steps are named); `value`: the measured number (a float, or a dict of named
      numbers for a compound criterion); `criterion`: the condition for "reproduced", in words
      (e.g. ``"<= 0.05"``); `holds`: whether `value` meets it (False for NaN).
    - `setting`: ``"paper"`` or ``"package-chosen"`` (`SETTINGS`); `why`: the measured cause of
      the verdict, or why the setting was chosen.
    - `expected`: False where the claim is not expected to hold at this setting by a
      measurement made before training (the verdict is then "not expected at this setting",
      whatever `holds` says; the value is still reported).
    - `revised`: True for a criterion fixed in issue 15 (``criterion_kind`` = `REVISED`).

    **Returns:** ``{"name", "claim", "section", "metric", "value", "criterion",
    "criterion_kind", "verdict", "setting", "why"}``.

    **Raises:** `ValueError` for a `setting` not in `SETTINGS`.
    """
    if setting not in SETTINGS:
        raise ValueError(f"`setting` must be one of {SETTINGS}; found {setting!r}.")
    verdict = VERDICTS[2] if not expected else VERDICTS[0] if bool(holds) else VERDICTS[1]
    return {
        "name": name,
        "claim": text,
        "section": section,
        "metric": metric,
        "value": value,
        "criterion": criterion,
        "criterion_kind": REVISED if revised else "stated criterion",
        "verdict": verdict,
        "setting": setting,
        "why": why,
    }


def chosen(value, paper: str, why: str) -> dict:
    """One ``chosen_settings`` entry: the package's `value` for a setting, what the `paper` says
    about it (``"not stated"`` where it is silent) and `why` the value was chosen."""
    return {"value": value, "paper": paper, "why": why}


def sensitivity(rows=None, *, quick: bool, reason: str | None = None) -> dict:
    """The ``sensitivity`` block: the figure's claims at the literal reading of the paper.

    `rows`: a list of ``{"setting": str, "claims": [claim records]}`` measured in the same full
    run. A quick run passes ``quick=True`` and no rows (``skipped``, with the reason); a figure
    whose every claim already runs at the paper's stated setting passes ``rows=[]`` and a
    `reason`. Returns ``{"skipped", "reason", "rows"}``.
    """
    if quick:
        return {
            "skipped": True,
            "rows": [],
            "reason": "quick mode: the sensitivity rows are measured in the full run only",
        }
    return {"skipped": False, "rows": list(rows or []), "reason": reason}


def phase_end(steps, loss, floor: float, frac: float = 0.02):
    """End of a model's learning phase: the first saved step at which `loss` <= floor + frac
    loss[0] (e.g. floor = the least-squares optimum of an NQF's linear feature model, or its
    final loss), or None if it never gets there. `steps` (n,), `loss` (n,) at those steps."""
    hit = np.flatnonzero(np.asarray(loss, float) <= floor + frac * float(loss[0]))
    return int(np.asarray(steps)[hit[0]]) if hit.size else None


def max_rel_error(x, ref) -> float:
    """max |x - ref| / |ref| over all entries (entries with ref = 0 must match exactly)."""
    x = np.asarray(x, dtype=float)
    ref = np.asarray(ref, dtype=float)
    err = np.abs(x - ref)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(err == 0, 0.0, err / np.abs(ref))
    return float(np.max(rel, initial=0.0))


def jsonable(obj):
    """Convert numpy scalars/arrays (recursively) to JSON types; non-finite floats become None."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


def prepare_out_dir(out_dir) -> Path:
    """Create `out_dir` (and parents) if needed; raise a clear error if it is not a directory."""
    out = Path(os.fspath(out_dir))
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"Output path {str(out)!r} exists and is not a directory.")
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_outputs(out: Path, name: str, fig, summary: dict) -> dict:
    """Save `fig` to out/NAME.png and `summary` to out/NAME.json; return the JSON dict."""
    summary = jsonable(summary)
    summary["png"] = str(out / f"{name}.png")
    summary["json"] = str(out / f"{name}.json")
    fig.savefig(out / f"{name}.png", dpi=150)
    with open(out / f"{name}.json", "w") as fh:
        json.dump(summary, fh, indent=2, allow_nan=False)
        fh.write("\n")
    return summary


def new_figure(ncols: int, *, width: float = 5.0, height: float = 4.0):
    """A matplotlib Figure with `ncols` axes in a row, drawn with the Agg canvas (no pyplot, so the
    user's backend and global state are untouched)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    axes = fig.subplots(1, ncols)
    return fig, np.atleast_1d(axes)
