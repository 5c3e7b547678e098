"""JAX compile events for the tests that check a repeated call compiles nothing."""

import contextlib

import jax

TRACE = "/jax/core/compile/jaxpr_trace_duration"
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def compile_events(names=(TRACE, BACKEND_COMPILE)):
    """Yields a list that collects the name of each `names` event (jax.monitoring) inside the
    block: one entry per jaxpr trace or backend compile."""
    seen: list[str] = []

    def listener(event, duration, **kwargs):
        if event in names:
            seen.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
