"""nqf's version (one place: the package, `nqf.io` headers and the CLI read it)."""

__version__ = "0.1.0"
