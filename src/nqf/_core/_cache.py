"""First-call latency: JAX's persistent compilation cache for nqf's compiled solvers.

Every nqf entry point compiles an XLA program for each new problem shape (new values of the
same shapes reuse it within a process). The first call in a fresh process therefore pays trace +
compile time, measured on 2 shared CPU cores (float64, fig3 shapes m = p = 5; docs/performance.md
has the table and how it was measured):

| entry point | cold | warm persistent cache |
|---|---|---|
| `solve_flow` glv | 4.5 s | 1.6 s |
| `solve_flow` factor | 5.0 s | 1.4 s |
| `solve_flow` M | 2.6 s | 1.5 s |
| `closed_sgd` (1000 steps) | 0.9 s | 0.3 s |
| `solve_sweep` glv (64 members) | 3.5 s | 1.9 s |

(one fresh process per entry, `benchmarks/bench_sweep.py` `FirstCall`; the machine was
shared, and these swing by ~2x between runs.)

The persistent cache removes the XLA compile but not the Python trace of the diffrax program,
so a warm cache cuts the latency by 1.7-3.5x here. **It is on by default** when nqf first
imports JAX, at `default_cache_dir()` (unless JAX's own ``jax_compilation_cache_dir`` is set:
that choice is kept; a default directory that cannot be used is skipped silently).
``NQF_COMPILATION_CACHE=0`` turns it off; ``NQF_COMPILATION_CACHE=1`` or ``=DIR`` asks for it
explicitly (a directory that cannot be used then warns, `CacheWarning`). JAX's cache setting is
process-wide: the user's own programs compiled in the same process are cached there too.

JAX does not persist programs with host callbacks, and equinox's runtime checks inside diffrax
(the check that ``SaveAt(ts=...)`` is increasing) are host callbacks unless ``EQX_ON_ERROR=nan``
(or ``off``). The default leaves equinox's error handling alone, so only nqf's programs without
such checks (the maps, oracles, sweeps' small programs) are persisted and ``solve_flow``'s
diffrax program is traced and compiled again in each process. An explicit
``NQF_COMPILATION_CACHE`` also sets ``EQX_ON_ERROR=nan`` when equinox is not yet imported, and
then the diffrax programs are persisted too (nqf validates ``ts`` on the host before compiling
and raises on non-finite results, so a failed in-program check still surfaces).

`enable_compilation_cache()` turns the cache on for this process at another directory. The
cache directory is trusted code: do not share it with users you do not trust (JAX's warning).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

from ._errors import NQFWarning

__all__ = ["enable_compilation_cache", "default_cache_dir"]


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/nqf/jax`` (``~/.cache/nqf/jax`` when XDG_CACHE_HOME is unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nqf" / "jax"


def enable_compilation_cache(path=None, *, min_compile_time_secs: float = 0.0) -> Path:
    """Turn on JAX's persistent compilation cache for this process.

    Compiled programs are written to `path` and read back by later processes (same JAX
    version, backend and program), which skips XLA compilation on their first calls.

    **Arguments:**

    - `path`: cache directory (created if missing); default `default_cache_dir()`,
      ``$XDG_CACHE_HOME/nqf/jax`` or ``~/.cache/nqf/jax``.
    - `min_compile_time_secs`: only programs that took at least this long to compile are
      written (JAX's ``jax_persistent_cache_min_compile_time_secs``, default there 1 s). nqf
      uses 0: most of its programs compile in 0.3-2 s and all are worth keeping.

    **Returns:** the cache directory as a `Path`.

    Equivalent to ``jax.config.update("jax_compilation_cache_dir", path)`` plus the threshold
    settings; the environment variable ``NQF_COMPILATION_CACHE=1`` (default path) or
    ``NQF_COMPILATION_CACHE=/some/dir`` calls it at ``import nqf``.

    **Raises:** `ValueError` for a negative `min_compile_time_secs`, or a `path` that cannot be
    created as a directory (an existing file, a path under a file, no permission).
    """
    if not min_compile_time_secs >= 0:
        raise ValueError(f"`min_compile_time_secs` must be >= 0; found {min_compile_time_secs!r}.")
    path = Path(default_cache_dir() if path is None else os.path.expanduser(os.fspath(path))).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(
            f"`path` {str(path)!r} cannot be used as the compilation cache directory "
            f"({type(err).__name__}: {err.strerror or err})."
        ) from None
    previous = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_secs))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # no size threshold
    if previous is not None and previous != str(path):
        # JAX initializes its cache object once, at the first compile after a directory is set;
        # switching directories later needs a reset (private API, guarded).
        try:
            from jax._src import compilation_cache

            compilation_cache.reset_cache()
        except Exception:  # pragma: no cover - depends on JAX internals
            pass
    return path


class CacheWarning(NQFWarning):
    """``NQF_COMPILATION_CACHE`` names a directory that cannot be used: nqf runs without the cache."""


def _enable_from_env() -> Path | None:
    """Called when nqf first imports JAX: honour ``NQF_COMPILATION_CACHE``.

    Unset: the cache is on at `default_cache_dir()` unless JAX's cache directory is already set
    (the user's own choice is kept); a directory that cannot be used is skipped silently.
    ``0`` / ``false`` / ``no`` / ``off``: off. ``1`` / ``true`` / ``yes`` / ``on``: the default
    directory; anything else: that directory. A directory that was asked for and cannot be
    created or written (a path under a file, no permission, a read-only file system) must not
    make ``import nqf`` (or ``nqf info``) fail: it warns (`CacheWarning`, naming the path and the
    reason) and nqf runs without the persistent cache. Returns the cache directory, or None if
    the cache stays off."""
    value = os.environ.get("NQF_COMPILATION_CACHE", "").strip()
    if value.lower() in ("0", "false", "no", "off"):
        return None
    if not value and jax.config.jax_compilation_cache_dir:
        return None  # the user's own cache directory
    explicit = bool(value) and value.lower() not in ("1", "true", "yes", "on")
    path = Path(os.path.expanduser(value)) if explicit else default_cache_dir()
    try:
        path = path.resolve()
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(f"no write permission on {str(path)!r}")
        return enable_compilation_cache(path)
    except (OSError, RuntimeError, ValueError) as err:
        if not value:
            return None  # the default directory is unusable here: run without the cache
        import warnings

        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        warnings.warn(
            f"NQF_COMPILATION_CACHE={value!r}: cannot use {str(path)!r} as the compilation cache "
            f"directory ({type(err).__name__}: {reason}); continuing without the persistent cache. "
            "Point NQF_COMPILATION_CACHE at a writable directory, set it to 1 for "
            f"{str(default_cache_dir())!r}, or to 0 to turn the cache off.",
            CacheWarning,
            stacklevel=2,
        )
        return None
