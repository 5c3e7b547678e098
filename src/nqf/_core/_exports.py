"""The public home of re-exported classes."""

__all__ = ["publish"]


def publish(package: str, namespace: dict) -> None:
    """Give each class of `package`'s ``__all__`` that a private module of the package defines
    (``nqf.solvers._solve.FlowSolution``) the package as its ``__module__`` (``nqf.solvers``),
    where it is re-exported: pickles then name the public path, which survives a reorganisation
    of the private modules (pickle finds a class by ``__module__`` and ``__qualname__``)."""
    for name in namespace["__all__"]:
        obj = namespace[name]
        if isinstance(obj, type) and obj.__module__.startswith(package + "._") and obj.__qualname__ == name:
            obj.__module__ = package
