"""Saving and loading results: `result.save(path)` and `nqf.load(path)`.

**On-disk format** (version 1). One ``.npz`` file (numpy's zip of arrays, written and read with
``allow_pickle=False``, so loading never executes code):

- ``__nqf__``: a JSON document {"format": "nqf-result", "version": 1, "nqf": the writer's
  version, "root": <node>} describing the object;
- one array per array-valued field, under the key the JSON names.

A <node> is {"array": key} (a numpy array, JAX arrays are saved as numpy), {"value": v} (None,
bool, int, str), {"float": "1.5" / "inf" / "nan"}, {"list": [...]}, {"tuple": [...]},
{"dict": {key: node}}, or {"object": class name, "fields": {name: node}} for nqf's result
classes, data sets (`DenseData`, `CommutingData`, `DiagonalData`, `BlockData`, `LowRankData`,
`FeedForwardData`, `He2Data`) and `NQFModel`. Objects are rebuilt field by field from these names only
(the classes registered with `register`; nqf's own classes are found in a fixed table of their
home modules, imported on first use, so a fresh process loads any nqf result; no arbitrary imports).

What a loaded result keeps: every saved array (states, losses, stats, the data set, the initial
condition) and the solver settings (`FlowSolution.settings`), so derived quantities (M, z,
loss, excess loss, ignition times) work as before, and dense output (`evaluate`, `z_at`, `M_at`,
`step_times`) is rebuilt on first use by solving again with the same settings (as an unsaved
solution's default `dense=None` does). A solution solved with a solver *instance* (not a name)
has no recorded solver and refuses dense output after loading; its saved arrays are complete.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np

from ._version import __version__

__all__ = ["save", "load", "Saveable", "register"]

FORMAT, VERSION = "nqf-result", 1


_CLASSES: dict = {}  # class name -> class: what `save` writes and `load` rebuilds

# class name -> the (public) module that defines nqf's saveable class: `load` imports that module,
# and only that one, when a file names a class that is not registered yet, so a fresh process reads
# any nqf result without importing its layer first (tests/network/test_heldout.py keeps this table
# complete: every class registered after importing all of nqf is here).
_HOMES = {
    **dict.fromkeys(
        ("BlockData", "CommutingData", "DenseData", "DiagonalData", "FeedForwardData", "He2Data", "LowRankData"),
        "nqf.data",
    ),
    "NQFModel": "nqf.data",
    **dict.fromkeys(("MapTrajectory", "SDEPaths", "WTrajectory"), "nqf.dynamics"),
    "WithLoss": "nqf.dynamics._flow",
    **dict.fromkeys(("FlowSolution", "MapSweep", "SweepSolution"), "nqf.solvers"),
    "GLVTrajectory": "nqf.solvers.kernels",
    **dict.fromkeys(("Asymptote", "OracleSolution"), "nqf.theory"),
    "SampleOracleSolution": "nqf.theory.samplewise",
    **dict.fromkeys(("Comparison", "Plan", "Prediction", "Recording", "DeepPrediction"), "nqf.network"),
    "DeepPath": "nqf.network._deep",
}


def _registered(name: str):
    """The class registered under `name`, importing its home module (`_HOMES`) if needed; None
    for a name nqf does not know."""
    cls = _CLASSES.get(name)
    if cls is None and name in _HOMES:
        import importlib

        importlib.import_module(_HOMES[name])
        cls = _CLASSES.get(name)
    return cls


def register(*classes):
    """Let `save`/`load` write and rebuild the dataclasses (or equinox Modules) `classes` field by
    field. Files name a class by its `__name__` only (`load` never imports anything), so names
    must be unique: nqf's data sets and `NQFModel` are registered where they are defined, nqf's
    `Saveable` result types register themselves, and a user's own result type (a dataclass,
    e.g. a `Saveable` subclass) is registered by calling this. Returns the first class (usable
    as a decorator).

    **Raises:** `ValueError` if another class of the same name is registered already."""
    for cls in classes:
        known = _CLASSES.get(cls.__name__)
        if (
            known is not None
            and known is not cls
            and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__)
        ):  # not a reload
            raise ValueError(
                f"nqf.io.register: a class named {cls.__name__!r} is registered already "
                f"({known.__module__}.{known.__qualname__}); files name classes by name, so give "
                f"{cls.__module__}.{cls.__qualname__} another name."
            )
        _CLASSES[cls.__name__] = cls
    return classes[0] if classes else None


class Saveable:
    """Mixin of nqf's result types: `save(path)` writes the result in the format above; pickling
    keeps the dataclass fields only (derived, cached quantities are recomputed after loading).

    A subclass names the fields it does not write in `_unsaved_fields` and rebuilds them in
    `_after_load` (called on the object `load` rebuilt)."""

    _unsaved_fields: tuple = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__module__.split(".")[0] == "nqf":  # nqf's own results; a user's calls `register`
            register(cls)

    def __getstate__(self):
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)

    def _after_load(self) -> None:
        """Rebuild the `_unsaved_fields` after `load` (default: nothing to rebuild)."""

    def save(self, path) -> str:
        """Write this result to `path` (a ``.npz`` file; the suffix is added if missing) and
        return the path written. Read it back with `nqf.load`."""
        return save(self, path)


def _is_array(x) -> bool:
    import jax

    return isinstance(x, (np.ndarray, np.generic, jax.Array)) and not isinstance(x, (bool, str))


def _encode(x, arrays: dict, key: str):
    if x is None or isinstance(x, (bool, str)):
        return {"value": x}
    if isinstance(x, (int, np.integer)) and not isinstance(x, np.bool_):
        return {"value": int(x)}
    if isinstance(x, (float, np.floating)):
        return {"float": repr(float(x))}
    if _is_array(x):
        arrays[key] = np.asarray(x)
        return {"array": key}
    if isinstance(x, (list, tuple)):
        kind = "list" if isinstance(x, list) else "tuple"
        return {kind: [_encode(v, arrays, f"{key}.{i}") for i, v in enumerate(x)]}
    if isinstance(x, dict):
        return {"dict": {str(k): _encode(v, arrays, f"{key}.{k}") for k, v in x.items()}}
    name = type(x).__name__
    if _CLASSES.get(name) is not type(x) or not dataclasses.is_dataclass(x):
        raise TypeError(f"nqf.save cannot write a {name} (in field {key!r} of `obj`).")
    skip = getattr(x, "_unsaved_fields", ())
    fields = {}
    for f in dataclasses.fields(x):
        if f.name in skip:
            continue  # rebuilt by `_after_load` (e.g. dense output: on first use; module docstring)
        fields[f.name] = _encode(getattr(x, f.name), arrays, f"{key}.{f.name}")
    return {"object": name, "fields": fields}


def _decode(node, arrays):
    if "value" in node:
        return node["value"]
    if "float" in node:
        return float(node["float"])
    if "array" in node:
        return arrays[node["array"]]
    if "list" in node:
        return [_decode(v, arrays) for v in node["list"]]
    if "tuple" in node:
        return tuple(_decode(v, arrays) for v in node["tuple"])
    if "dict" in node:
        return {k: _decode(v, arrays) for k, v in node["dict"].items()}
    cls = _registered(node["object"])
    if cls is None:
        raise ValueError(
            f"nqf.load: unknown object type {node['object']!r} in the file (not one of nqf's result types; a "
            "user's own type must be registered with nqf.io.register before loading)."
        )
    obj = object.__new__(cls)
    for name, v in node["fields"].items():
        object.__setattr__(obj, name, _decode(v, arrays))
    if isinstance(obj, Saveable):
        obj._after_load()
    return obj


def save(obj, path) -> str:
    """Write a result (`FlowSolution`, `SweepSolution`, `OracleSolution`, `MapTrajectory`, ...)
    to the ``.npz`` file `path` (suffix added if missing); returns the path written.

    **Raises:** `TypeError` for an object (or a field) the format cannot hold, or a `path` that is
    not a file name (str or os.PathLike); `ValueError` for an empty path or one that ends in a
    folder separator; `OSError` (e.g. `FileNotFoundError`) if the folder does not exist or is
    not writable."""
    path = _file_path(path)
    if not path.endswith(".npz"):
        path += ".npz"
    arrays: dict = {}
    root = _encode(obj, arrays, "root")
    header = {"format": FORMAT, "version": VERSION, "nqf": __version__, "root": root}
    np.savez(path, __nqf__=np.array(json.dumps(header, allow_nan=False)), **arrays)
    return path


def _file_path(path) -> str:
    """`path` of `save` / `load` as a str naming a file. **Raises:** `TypeError` for a path that
    is not a file name (str or os.PathLike: an int, None, a list); `ValueError` for an empty
    path or one that ends in a folder separator."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise TypeError(
            f"`path` must be a file name (str or os.PathLike); found {type(path).__name__} {path!r}."
        ) from None
    if not isinstance(path, str) or not os.path.basename(path):
        raise ValueError(f"`path` must name a file (the .npz suffix is added if missing); found {path!r}.")
    return path


def _read(path: str) -> tuple[dict, dict]:
    """(header, arrays) of the nqf result file `path`; `ValueError` naming the path when it is not
    one (another format, a plain .npy, a truncated or damaged archive), the reader's error chained."""
    try:
        f = np.load(path, allow_pickle=False)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as err:  # numpy's pickle message, zipfile.BadZipFile, EOFError, ...
        raise ValueError(
            f"`path` {path!r} is not an nqf result file (written by nqf.save: a zip archive with an '__nqf__' header); "
            f"numpy.load could not read it ({type(err).__name__}, chained): another format, or a truncated or "
            "damaged nqf file (save it again)."
        ) from err
    if not isinstance(f, np.lib.npyio.NpzFile):
        raise ValueError(f"`path` {path!r} is not an nqf result file (written by nqf.save); found a plain .npy array.")
    with f:
        if "__nqf__" not in f.files:
            raise ValueError(f"`path` {path!r} is not an nqf result file (no '__nqf__' header).")
        try:
            header = json.loads(str(f["__nqf__"]))
            arrays = {k: f[k] for k in f.files if k != "__nqf__"}
        except Exception as err:  # a damaged member: zlib.error, BadZipFile, EOFError, JSONDecodeError
            raise ValueError(
                f"`path` {path!r}: the nqf result file is damaged (truncated or corrupt): {type(err).__name__}: {err}"
            ) from err
    return header, arrays


def load(path):
    """Read a result written by `save` / `result.save`.

    **Raises:** `ValueError` naming the path if the file is not an nqf result (another format, a
    truncated or damaged file) or has a newer format version; `FileNotFoundError` if it does not
    exist; `TypeError` for a `path` that is not a file name (str or os.PathLike), `ValueError` for an
    empty one."""
    path = _file_path(path)
    header, arrays = _read(path)
    if header.get("format") != FORMAT or header.get("version", math.inf) > VERSION:
        raise ValueError(
            f"{os.fspath(path)!r}: unsupported format {header.get('format')!r} "
            f"version {header.get('version')!r} (this nqf reads {FORMAT!r} version {VERSION})."
        )
    return _decode(header["root"], arrays)
