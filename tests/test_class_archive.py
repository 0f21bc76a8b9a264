"""The class-data-sharing archive a local Spark JVM maps at start
(`sharestate.spark.class_archive`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharestate import jars
from sharestate.spark import class_archive
from sharestate.spark.session import REPO_ROOT


def test_options_name_the_archive_only_when_it_exists_and_is_wanted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jars.CACHE_ENV, str(tmp_path))
    path = class_archive.archive_path()
    if path is None:
        pytest.skip("this Java cannot map a dynamic class archive (Java 13+ needed)")
    assert path.parent == tmp_path
    assert class_archive.java_options({}) is None  # not made yet
    path.write_bytes(b"")
    assert class_archive.java_options({}) == f"-XX:SharedArchiveFile={path}"
    assert class_archive.java_options({class_archive.JAVA_OPTIONS: "-Xss4m"}) == \
        f"-Xss4m -XX:SharedArchiveFile={path}"
    assert class_archive.java_options({class_archive.SETTING: "off"}) is None
    assert class_archive.java_options(
        {class_archive.JAVA_OPTIONS: "-XX:SharedArchiveFile=/elsewhere.jsa"}) is None


PROBE = """
import sys
from sharestate.spark.session import build_session
build_session("archive-probe", ui=False, conf={
    "spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={sys.argv[1]}"}
).range(3).count()
"""


@pytest.mark.slow
def test_a_local_session_maps_the_archive_make_install_made(tmp_path: Path) -> None:
    """`make install` runs `python -m sharestate.spark.class_archive`; a session's JVM then loads
    Spark's classes from it (the JVM's class-load log names the archive as their source)."""
    path = class_archive.archive_path()
    if path is None:
        pytest.skip("this Java cannot map a dynamic class archive (Java 13+ needed)")
    if not path.is_file():
        pytest.skip(f"no class archive at {path}: `make install` makes it")
    log = tmp_path / "classes.log"
    subprocess.run([sys.executable, "-c", PROBE, str(log)], cwd=REPO_ROOT,
                   capture_output=True, timeout=300, check=True)
    loaded = [line for line in log.read_text().splitlines()
              if " org.apache.spark.SparkContext " in line]
    assert loaded and "shared objects file (top)" in loaded[0]
