"""The optional C extension `sharestate._native`, typed by `sharestate/_native.pyi`.

`enabled()` says whether it is in use: not when it is not built or `SHARESTATE_PURE_PYTHON=1`;
every caller has a pure-Python path that gives identical results. Call `module.<function>`
only after `enabled()`: mypy types `module` as the extension, so every call across the
boundary is checked against the stub, while at run time `module` is None when the extension
is off (mypy's `warn_unreachable` flags a test of `module is None`, which it cannot check).
A built extension that fails to load raises: it is never silently replaced.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import TYPE_CHECKING

PURE_PYTHON_ENV = "SHARESTATE_PURE_PYTHON"
"""Set to 1 to run pure Python (and, at install time, not to build the extension)."""


def _load() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:
        return importlib.import_module("sharestate._native")
    except ModuleNotFoundError as exc:
        if exc.name != "sharestate._native":
            raise
        return None


if TYPE_CHECKING:
    from sharestate import _native

    module = _native
else:
    module = _load()


def enabled() -> bool:
    """Whether calls go to the C extension."""
    return module is not None


def sources() -> str:
    """The digest of the C sources the extension in use was built from ("-": none in use;
    "unknown": an extension built before it carried one, to be rebuilt)."""
    return getattr(module, "SOURCES", "unknown") if module is not None else "-"
