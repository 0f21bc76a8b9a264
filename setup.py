"""Build the optional C extension; sharestate falls back to pure Python without it."""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Never fail an install because a compiler is missing: warn and go pure Python."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            print(f"warning: sharestate._native not built ({exc}); using pure Python")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"warning: {ext.name} not built ({exc}); using pure Python")


setup(
    ext_modules=[Extension(
        "sharestate._native",
        sources=["csrc/module.c", "csrc/structs.c", "csrc/records.c", "csrc/batches.c",
                 "csrc/keyvalue.c", "csrc/combine.c", "csrc/replay.c", "csrc/audit.c",
                 "csrc/columns.c", "csrc/record_type.c"],
        depends=["csrc/native.h"],
        extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    )],
    cmdclass={"build_ext": OptionalBuildExt},
)
