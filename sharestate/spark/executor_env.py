"""The Python environment a cluster's executors run sharestate in, packed for spark-submit.

    python -m sharestate.spark.executor_env --out dist/sharestate-env.tar.gz

    PYSPARK_DRIVER_PYTHON=.venv/bin/python PYSPARK_PYTHON=./environment/bin/python \\
        .venv/bin/spark-submit --master spark://HOST:7077 \\
        --archives dist/sharestate-env.tar.gz#environment pipelines/run_all.py ...

A zipped wheel on `--py-files` cannot load the C extension (a `.so` loads from a file, not a
zip member), so executors given only that run the pure-Python twins, several times slower.
PySpark's way to ship native code is a packed environment: a virtualenv holding sharestate
(with its extension) and what executors import, archived with venv-pack; each executor
unpacks it into its working directory as `environment/`. The packed virtualenv points at
this machine's Python interpreter (venv-pack keeps that link), so nodes need the same
Python at the same path — true of nodes built from one image; otherwise install the wheel
on the nodes and leave `PYSPARK_PYTHON` pointing at that Python.

Executors import the core, pyarrow, pandas (Spark's Arrow functions), delta-rs and
confluent-kafka (the live source), at the versions installed here; pyspark comes from the
cluster's workers, and the driver's own dependencies (Great Expectations, plotly) stay out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import venv
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from sharestate import exit_codes
from sharestate.spark.console import heartbeat

EXECUTOR_PACKAGES = ("crc32c", "cramjam", "lz4", "zstandard", "numpy", "pyarrow", "pandas",
                     "deltalake", "confluent-kafka")
"""What executors import besides sharestate (and pyspark, which the workers provide)."""
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class PackError(RuntimeError):
    """The environment could not be built: one line, exit 2."""


def pinned() -> list[str]:
    """`EXECUTOR_PACKAGES` at the versions of this environment."""
    pins = []
    for name in EXECUTOR_PACKAGES:
        try:
            pins.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            raise PackError(f"{name} is not installed here: install sharestate first") from None
    return pins


def _run(argv: list[str], what: str, cwd: Path) -> None:
    """Run `argv` in `cwd`, without the caller's PYTHONPATH: the environment's Python sees
    only what is installed in it. With a checkout on that path, pip found sharestate there
    ("already satisfied") and left it out of the environment, and the check below imported
    the checkout's: the archive passed, and the executors failed on `import sharestate`."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd, env=env)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PackError(f"{what} failed: {tail[0]}")


def build_wheel(out: Path) -> Path:
    """A wheel of the checkout this module belongs to (its C extension built)."""
    if not (PROJECT_ROOT / "pyproject.toml").is_file():
        raise PackError("not running from a checkout: give --wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
          str(out), str(PROJECT_ROOT)], "building the wheel", PROJECT_ROOT)
    wheels = sorted(out.glob("sharestate-*.whl"))
    if not wheels:
        raise PackError("building the wheel left no sharestate wheel")
    return wheels[-1]


def check_environment(env: Path) -> None:
    """The environment's Python imports sharestate with its C extension, from itself."""
    _run([str(env / "bin" / "python"), "-c",
          "from sharestate import native; assert native.module is not None"],
         "loading the C extension in the environment", env)


def pack(out: Path, wheel: Path | None = None) -> Path:
    """Build the executors' environment and pack it into `out` (a .tar.gz)."""
    import venv_pack

    with tempfile.TemporaryDirectory(prefix="sharestate-env-") as tmp:
        work = Path(tmp)
        wheel = wheel or build_wheel(work / "dist")
        env = work / "environment"
        venv.create(env, with_pip=True)
        python = str(env / "bin" / "python")
        _run([python, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
             f"installing {wheel.name}", work)
        _run([python, "-m", "pip", "install", "--quiet", *pinned()],
             "installing the executors' packages", work)
        check_environment(env)
        out.parent.mkdir(parents=True, exist_ok=True)
        venv_pack.pack(prefix=str(env), output=str(out), force=True, verbose=False)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sharestate.spark.executor_env",
                                     description="Pack the executors' Python environment.")
    parser.add_argument("--out", type=Path, default=Path("dist/sharestate-env.tar.gz"),
                        help="the archive to write (default %(default)s)")
    parser.add_argument("--wheel", type=Path,
                        help="the sharestate wheel to install (default: built from this checkout)")
    args = parser.parse_args(argv)
    try:
        with heartbeat("executor-env"):
            path = pack(args.out, args.wheel)
    except PackError as exc:
        print(f"sharestate: error: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    print(f"executor environment: {path} ({path.stat().st_size >> 20} MiB)")
    return exit_codes.OK


if __name__ == "__main__":
    sys.exit(main())
