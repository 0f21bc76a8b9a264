"""The pinned jar sets: the lock matches the sets, and the fetcher trusts only checksums."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sharestate import jars


def test_lock_holds_every_root_of_every_set() -> None:
    lock = jars.read_lock()
    assert set(lock) == set(jars.SETS)
    for name, roots in jars.SETS.items():
        locked = {jar.coordinate for jar in lock[name]}
        missing = [root for root in roots if root not in locked]
        assert not missing, f"{name}: re-run `python -m sharestate.jars lock {name}`"
        assert all(len(jar.sha256) == 64 and jar.size > 0 for jar in lock[name])


def test_delta_set_leaves_out_what_pyspark_ships() -> None:
    pyspark_jars = Path(__import__("pyspark").__file__).parent / "jars"
    shipped = {path.name for path in pyspark_jars.glob("*.jar")}
    delta = jars.delta_jars()
    assert {path.name for path in delta.paths}.isdisjoint(shipped)
    assert any(path.name == "delta-spark_4.2_2.13-4.4.0.jar" for path in delta.paths)
    import importlib.metadata

    assert importlib.metadata.version("delta-spark") == "4.4.0"


def test_missing_set_names_make_jars(tmp_path: Path) -> None:
    found = jars.jar_set("kafka-4.3", root=tmp_path)
    assert not found.present and found.missing
    with pytest.raises(jars.JarsMissing, match="make jars"):
        found.classpath()


def test_fetch_refuses_bytes_whose_checksums_differ(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    payload = b"not the jar"
    sha1 = hashlib.sha1(payload).hexdigest().encode()
    served = {"x.jar": payload, "x.jar.sha1": sha1}
    monkeypatch.setattr(jars, "_download",
                        lambda url, tries=4: served[url.rsplit("/", 1)[1].replace(
                            "x-1.jar", "x.jar")])
    jar = jars.Jar("g:x:1", hashlib.sha256(b"the jar").hexdigest(), 7)
    with pytest.raises(jars.FetchError, match="SHA-256"):
        jars.fetch_jar(jar, tmp_path)
    assert not (tmp_path / jar.relpath).exists()
    served["x.jar.sha1"] = b"0" * 40
    with pytest.raises(jars.FetchError, match="SHA-1"):
        jars.fetch_jar(jar, tmp_path)
    good = jars.Jar("g:x:1", hashlib.sha256(payload).hexdigest(), len(payload))
    served["x.jar.sha1"] = sha1
    assert jars.fetch_jar(good, tmp_path) is True
    assert (tmp_path / good.relpath).read_bytes() == payload
    assert jars.fetch_jar(good, tmp_path) is False
