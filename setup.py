"""Build the C extension `sharestate._native` (C twins of the hot pure-Python paths).

A failed build is an error. Without a C compiler, install with SHARESTATE_PURE_PYTHON=1: the
extension is then not built and sharestate runs its pure-Python paths (same results, slower).
Under CI (CI=true) the extension is built whatever that variable says.
"""

import hashlib
import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

PURE_PYTHON_ENV = "SHARESTATE_PURE_PYTHON"


def _under_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


class BuildExt(build_ext):
    """A failed build stops the install, saying how to install without a compiler."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            raise SystemExit(
                f"error: {ext.name} could not be built: {exc}\n"
                f"Install a C compiler, or install sharestate without its C extension "
                f"(pure Python, same results, slower) with {PURE_PYTHON_ENV}=1.") from exc


CSRC = Path(__file__).resolve().parent / "csrc"


def sources_digest() -> str:
    """SHA-256 over csrc/*.c and csrc/*.h (names and bytes): the module's `SOURCES`."""
    digest = hashlib.sha256()
    for path in sorted([*CSRC.glob("*.c"), *CSRC.glob("*.h")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


NATIVE = Extension(
    "sharestate._native",
    sources=["csrc/module.c", "csrc/structs.c", "csrc/records.c", "csrc/batches.c",
             "csrc/resync.c", "csrc/keyvalue.c", "csrc/combine.c", "csrc/replay.c",
             "csrc/audit.c", "csrc/columns.c", "csrc/record_type.c", "csrc/consumed.c",
             "csrc/lagwalk.c"],
    depends=["csrc/native.h"],
    define_macros=[("SHARESTATE_SOURCES", f'"{sources_digest()}"')],
    extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
)
PURE = os.environ.get(PURE_PYTHON_ENV) == "1" and not _under_ci()
if PURE:
    print(f"{PURE_PYTHON_ENV}=1: sharestate._native is not built; sharestate runs pure Python")

setup(ext_modules=[] if PURE else [NATIVE], cmdclass={"build_ext": BuildExt})
