"""Names a package offers but imports on first use (PEP 562 module ``__getattr__``), so that
importing the package stays cheap: a training script that only records pays for nothing
else."""

from __future__ import annotations

from importlib import import_module

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, lazy: dict[str, str], namespace: dict):
    """The module ``__getattr__`` of ``package``: ``name`` in ``lazy`` is imported from the
    module ``lazy[name]`` (relative to the package) on first use and kept in ``namespace``
    (the package's globals), so later lookups cost nothing."""

    def __getattr__(name: str):
        if name in lazy:
            value = getattr(import_module(f".{lazy[name]}", package), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
