"""The optional C extension `sharestate._native` and what it needs from Python.

`module` is the extension, or None when it is not built or `SHARESTATE_PURE_PYTHON=1`;
every caller has a pure-Python path that gives identical results.
"""

from __future__ import annotations

import importlib
import os
from functools import cache
from types import ModuleType
from typing import Any

from sharestate.records.spec import Slot, StructLayout


def _load() -> ModuleType | None:
    if os.environ.get("SHARESTATE_PURE_PYTHON") == "1":
        return None
    try:
        return importlib.import_module("sharestate._native")
    except ImportError:
        return None


module: ModuleType | None = _load()


def _slot_program(slot: Slot) -> tuple[Any, ...]:
    sub: Any = None
    if slot.struct is not None:
        sub = _struct_program(slot.struct)
    elif slot.element is not None:
        sub = _slot_program(slot.element)
    return (slot.index, int(slot.kind), slot.nullable, slot.flexible, sub, slot.name)


def _struct_program(layout: StructLayout) -> tuple[Any, ...]:
    return (layout.flexible, layout.width, layout.defaults,
            tuple(_slot_program(s) for s in layout.regular),
            tuple((tag, _slot_program(s)) for tag, s in layout.tagged),
            layout.names)


@cache
def program(layout: StructLayout) -> Any:
    """The compiled native form of `layout` (cached; layouts live for the process)."""
    assert module is not None
    return module.compile(_struct_program(layout))
