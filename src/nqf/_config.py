"""Floating-point policy.

nqf computes in float64: small-initialization dynamics start at z ~ eps (down to 1e-12) and the
package's oracles are compared to the flow at relative 1e-8, which float32 cannot resolve.
Importing nqf therefore turns on JAX's ``jax_enable_x64`` flag (the same switch as
``JAX_ENABLE_X64=1``). If a user turns it off again, every nqf entry point raises instead of
silently truncating float64 input to float32.
"""

import jax

jax.config.update("jax_enable_x64", True)


def require_x64() -> None:
    """Raise `RuntimeError` if JAX's float64 support has been turned off after importing nqf."""
    if not jax.config.jax_enable_x64:
        raise RuntimeError(
            "nqf needs float64, but JAX's `jax_enable_x64` flag is off (it was turned off after "
            "`import nqf`). Re-enable it with `jax.config.update('jax_enable_x64', True)`; nqf "
            "does not truncate float64 input to float32."
        )


# Persistent compilation cache at import (NQF_COMPILATION_CACHE=1 or a directory; see nqf.cache).
def _enable_cache_from_env() -> None:
    import os

    if os.environ.get("NQF_COMPILATION_CACHE"):
        import sys

        # diffrax/equinox runtime checks are host callbacks, and JAX never persists a program
        # with host callbacks; EQX_ON_ERROR=nan (read when equinox is imported) removes them.
        if "equinox" not in sys.modules:
            os.environ.setdefault("EQX_ON_ERROR", "nan")
        from .cache import _enable_from_env

        _enable_from_env()


_enable_cache_from_env()
