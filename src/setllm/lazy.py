"""A package's names imported on first use (PEP 562), so that a light import pays for torch
only when it uses a name that needs it: ``setllm --help``, the verbs (:mod:`setllm.verbs`)
and the Ray ingress import ``setllm``, ``setllm.loading`` or ``setllm.core.doccache`` for
their plain parts alone. Each such package lists its exports by module with :func:`exports`."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def exports(package: str, table: Mapping[str, Sequence[str]]) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` for ``package`` (its ``__name__``), which
    exports ``table``: module (relative to the package) -> the names it gives. A submodule is
    found by its name too, as it was once the package had imported it."""
    where = {name: module for module, names in table.items() for name in names}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name in where:
            value = getattr(importlib.import_module(f".{where[name]}", package), name)
            namespace[name] = value  # once
            return value
        if not name.startswith("_"):  # dunder probes (copy, pickle, inspect) are no submodules
            try:
                return importlib.import_module(f".{name}", package)
            except ModuleNotFoundError as e:
                if e.name != f"{package}.{name}":
                    raise  # the submodule exists and lacks a dependency: say which
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*namespace, *where])

    return list(where), __getattr__, __dir__
