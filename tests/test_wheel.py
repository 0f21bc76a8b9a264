"""The wheel pip builds from the checkout (what `make executor-env` and the README's
`pip wheel` install on nodes): built without setuptools' "Package would be ignored"
warnings, and carrying every schema file the code reads at run time."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT

pytestmark = pytest.mark.slow  # it compiles the C extension


def test_wheel_builds_cleanly_and_carries_every_schema(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (PROJECT_ROOT / ".git").exists():
        pytest.skip("needs a git checkout to copy the tracked files from")
    # pip builds in the source tree (build/, *.egg-info): build a copy of the tracked files
    source = tmp_path / "src"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=PROJECT_ROOT, check=True,
                             capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, tracked):
        if (PROJECT_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w",
                            str(tmp_path / "dist"), str(source)],
                           capture_output=True, text=True, timeout=600)
    output = built.stdout + built.stderr
    assert built.returncode == 0, output[-3000:]
    assert "would be ignored" not in output and "BuildBackendWarning" not in output, \
        output[output.find("Warning") - 200:][:3000]
    [wheel] = (tmp_path / "dist").glob("sharestate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    schemas = PROJECT_ROOT / "schemas"
    expected = {f"sharestate/schemas/{path.relative_to(schemas)}"
                for path in schemas.rglob("*.json")}
    assert len(expected) > 50
    assert expected <= names, sorted(expected - names)
    assert {"sharestate/jars.lock", "sharestate/_native.pyi",
            "sharestate/spark/log4j2.properties"} <= names
