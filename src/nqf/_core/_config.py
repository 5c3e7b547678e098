"""Floating-point policy: float64, switched on globally, checked wherever nqf computes.

nqf computes in float64: small-initialization dynamics start at z ~ eps (down to 1e-12) and the
package's oracles are compared to the flow at relative 1e-8, which float32 cannot resolve.
Importing nqf therefore turns on JAX's ``jax_enable_x64`` flag for the process (the same switch
as ``JAX_ENABLE_X64=1``).

The switch stays global rather than scoped to nqf's own calls: JAX fixes the dtype of every
traced value when a function is traced, so float64 that was switched on only inside nqf would
not hold when nqf runs under the user's `jax.jit`, `jax.vmap` or `jax.grad` (where nqf's code is
traced by the user's transformation), and the data sets and results that nqf returns hold
float64 arrays that user code keeps computing with. If a user turns the flag off after import,
nqf refuses instead of computing in float32: `require_x64` raises `RuntimeError` in every
constructor and entry point (through `nqf._core._checks.as_array`), in `measure_ignition_times`,
`measure_sample_ignition_times` and `extract`, and in the methods of an existing result that
compute with JAX (`FlowSolution.evaluate`, `z_at`, `M_at`, `mu_at` and its derived state), so
nothing silently returns float32 values or NaN. Turning the flag back on makes everything work
again, including results built before.
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


# nqf's persistent compilation cache: on by default (nqf.enable_compilation_cache; NQF_COMPILATION_CACHE).
def _enable_cache_from_env() -> None:
    import os

    value = os.environ.get("NQF_COMPILATION_CACHE", "").strip()
    if value and value.lower() not in ("0", "false", "no", "off") and "equinox" not in __import__("sys").modules:
        # Asked for explicitly: also persist the diffrax programs. Their runtime checks
        # (equinox.error_if) are host callbacks, and JAX never persists a program with host
        # callbacks; EQX_ON_ERROR=nan (read when equinox is imported) removes them. The default
        # (variable unset) leaves equinox's error handling alone.
        os.environ.setdefault("EQX_ON_ERROR", "nan")
    from ._cache import _enable_from_env

    _enable_from_env()


_enable_cache_from_env()
