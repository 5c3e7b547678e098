"""Shared plumbing of the figure reproductions: check records, JSON output, figure style."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

# One color per mode, in the order of matplotlib's default cycle (as in the paper's figures).
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
          "tab:pink", "tab:gray", "tab:olive", "tab:cyan")


def check(name: str, value, bound) -> dict:
    """One check record ``{"name", "value", "bound", "passed"}``; passed iff value <= bound
    (False for a NaN value)."""
    value = float(value)
    bound = float(bound)
    return {"name": name, "value": value, "bound": bound, "passed": bool(value <= bound)}


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
