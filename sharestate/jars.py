"""Pinned jar sets from Maven Central: the lock, the local cache, the fetcher.

Each set (a Kafka broker release, Kafka's tools, Delta Lake for the `jvm` backend) is
resolved once with Maven into `sharestate/jars.lock` — every jar with its SHA-256 — and
that lock is committed. `python -m sharestate.jars fetch` (`make jars`) downloads exactly
those files into `jars/` of the user's cache folder (`user_cache()`, Maven's directory
layout), checking Maven Central's `.sha1`
and the lock's SHA-256 before a file is moved into place; nothing is fetched at run time.
`python -m sharestate.jars lock` re-resolves the sets (needs `mvn`) after a change of
`SETS`. Standard library only: it runs before the project is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
CACHE_ENV = "SHARESTATE_CACHE_DIR"
LOCK_FILE = Path(__file__).with_name("jars.lock")

# The roots of each set; Maven resolves their runtime dependencies into the lock.
# Broker sets add log4j's slf4j binding (the broker logs through slf4j 1.7, and its
# artifacts leave the binding to the distribution; its log4j release is the one
# kafka-server's pom names). Kafka 4.3 moved kafka-dump-log into
# kafka-tools, which Maven Central serves up to 4.3.1 while the broker goes to 4.4.0 (and
# 4.3.1's tools do not link against 4.4.0's classes): 4.3.1 is the newest release whose
# broker and tools run together, the judge; 4.4.0's broker is judged over the protocol by
# 4.3.1's admin tools.
SETS: dict[str, tuple[str, ...]] = {
    "kafka-4.3": (
        "org.apache.kafka:kafka_2.13:4.3.1",
        "org.apache.kafka:kafka-tools:4.3.1",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5",
    ),
    "kafka-4.4": (
        "org.apache.kafka:kafka_2.13:4.4.0",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5",
    ),
    "kafka-4.0": (
        "org.apache.kafka:kafka_2.13:4.0.2",
        "org.apache.kafka:kafka-tools:4.0.2",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",
    ),
    "kafka-4.1": (
        "org.apache.kafka:kafka_2.13:4.1.2",
        "org.apache.kafka:kafka-tools:4.1.2",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.3",
    ),
    "kafka-4.2": (
        "org.apache.kafka:kafka_2.13:4.2.2",
        "org.apache.kafka:kafka-tools:4.2.2",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5",
    ),
    # delta-spark 4.4.0 is built for Spark 4.2 (the pip package `delta-spark` is pinned to
    # the same release); jars PySpark already ships are left out at lock time.
    "delta-4.4": (
        "io.delta:delta-spark_4.2_2.13:4.4.0",
        "io.delta:delta-storage:4.4.0",
    ),
}
PROVIDED_BY_PYSPARK = frozenset({"delta-4.4"})


@dataclass(frozen=True)
class Jar:
    """One locked file: its Maven coordinate (group:artifact:version) and SHA-256."""

    coordinate: str
    sha256: str
    size: int

    @property
    def relpath(self) -> str:
        group, artifact, version = self.coordinate.split(":")
        return f"{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"

    @property
    def url(self) -> str:
        return f"{MAVEN_CENTRAL}/{self.relpath}"


@dataclass(frozen=True)
class JarSet:
    """A locked set's files in the cache."""

    name: str
    jars: tuple[Jar, ...]
    root: Path

    @property
    def paths(self) -> list[Path]:
        return [self.root / jar.relpath for jar in self.jars]

    @property
    def missing(self) -> list[Path]:
        return [path for path in self.paths if not path.is_file()]

    @property
    def present(self) -> bool:
        return bool(self.jars) and not self.missing

    def classpath(self) -> str:
        """The set as a Java class path; JarsMissing if any file is not in the cache."""
        if not self.present:
            raise JarsMissing(f"jar set {self.name} is not in {self.root} "
                              f"({len(self.missing)} files missing): run `make jars`")
        return os.pathsep.join(str(path) for path in self.paths)


class JarsMissing(RuntimeError):
    """A jar set is needed but not in the cache."""


class FetchError(RuntimeError):
    """A download failed or its checksum did not match."""


def user_cache() -> Path:
    """sharestate's cache folder: `$SHARESTATE_CACHE_DIR`, else `$XDG_CACHE_HOME/sharestate`,
    else `~/.cache/sharestate`."""
    if folder := os.environ.get(CACHE_ENV):
        return Path(folder).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sharestate"


def cache_dir() -> Path:
    """Where jars are kept: `jars/` in the user's cache folder."""
    return user_cache() / "jars"


def read_lock(path: Path = LOCK_FILE) -> dict[str, tuple[Jar, ...]]:
    """The lock's sets: lines `set<TAB>group:artifact:version<TAB>sha256<TAB>size`."""
    sets: dict[str, list[Jar]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 4 or len(fields[1].split(":")) != 3:
            raise ValueError(f"{path}:{number}: malformed lock line {line!r}")
        sets.setdefault(fields[0], []).append(Jar(fields[1], fields[2], int(fields[3])))
    return {name: tuple(jars) for name, jars in sets.items()}


def jar_set(name: str, root: Path | None = None) -> JarSet:
    """A named set of the lock (KeyError names the sets there are)."""
    sets = read_lock()
    if name not in sets:
        raise KeyError(f"no jar set {name!r}; sets: {', '.join(sorted(sets))}")
    return JarSet(name, sets[name], root or cache_dir())


def delta_jars() -> JarSet:
    """Delta Lake's jars for the `jvm` backend (check `.present` before using them)."""
    return jar_set("delta-4.4")


def _sha(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(url: str, tries: int = 4) -> bytes:
    for attempt in range(tries):
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                data: bytes = response.read()
                return data
        except OSError as error:
            if attempt == tries - 1:
                raise FetchError(f"{url}: {error}") from error
            time.sleep(2 ** attempt)
    raise AssertionError("unreachable")


def fetch_jar(jar: Jar, root: Path) -> bool:
    """Put one jar in the cache, checksums verified; False when it was already there."""
    target = root / jar.relpath
    if target.is_file() and _sha(target, "sha256") == jar.sha256:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    data = _download(jar.url)
    published = _download(jar.url + ".sha1").decode("ascii", "replace").split()
    sha1, sha256 = hashlib.sha1(data).hexdigest(), hashlib.sha256(data).hexdigest()
    if not published or published[0].lower() != sha1:
        raise FetchError(f"{jar.url}: SHA-1 {sha1} is not Maven Central's {published[:1]}")
    if sha256 != jar.sha256:
        raise FetchError(f"{jar.url}: SHA-256 {sha256} is not the lock's {jar.sha256}")
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as handle:
        handle.write(data)
    Path(handle.name).replace(target)
    return True


def fetch(names: Iterable[str], root: Path | None = None) -> tuple[int, int]:
    """Fetch the named sets; (files downloaded, files already cached)."""
    root = root or cache_dir()
    sets = read_lock()
    jars = sorted({jar for name in names for jar in sets[name]}, key=lambda jar: jar.relpath)
    with ThreadPoolExecutor(max_workers=6) as pool:
        fetched = list(pool.map(lambda jar: fetch_jar(jar, root), jars))
    return sum(fetched), len(fetched) - sum(fetched)


def _pom(roots: Sequence[str]) -> str:
    dependencies = "".join(
        "<dependency><groupId>{}</groupId><artifactId>{}</artifactId>"
        "<version>{}</version></dependency>".format(*root.split(":")) for root in roots)
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0'
            "</modelVersion><groupId>sharestate</groupId><artifactId>jar-set</artifactId>"
            "<version>0</version><packaging>pom</packaging>"
            f"<dependencies>{dependencies}</dependencies></project>")


def _pyspark_artifacts() -> set[str]:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("locking the delta set needs pyspark installed (its jars are left out)")
    folder = Path(next(iter(spec.submodule_search_locations))) / "jars"
    names = (re.match(r"(.+?)-\d", jar.name) for jar in folder.glob("*.jar"))
    return {name.group(1) for name in names if name}


def resolve(name: str) -> list[Jar]:
    """Resolve one set with Maven (runtime scope) into locked jars."""
    with tempfile.TemporaryDirectory() as work:
        Path(work, "pom.xml").write_text(_pom(SETS[name]))
        listing = Path(work, "list.txt")
        subprocess.run(["mvn", "-B", "-q", "dependency:list", "-DincludeScope=runtime",
                        f"-DoutputFile={listing}", "-DoutputAbsoluteArtifactFilename=true"],
                       cwd=work, check=True, stdout=subprocess.DEVNULL)
        lines = listing.read_text().splitlines()
    skip = _pyspark_artifacts() if name in PROVIDED_BY_PYSPARK else set()
    jars = []
    for line in lines:
        parts = line.strip().split(":")
        if len(parts) < 6 or parts[2] != "jar":
            continue
        group, artifact, _, version, _scope, path = parts[:6]
        if artifact in skip:
            continue
        file = Path(path)
        jars.append(Jar(f"{group}:{artifact}:{version}", _sha(file, "sha256"),
                        file.stat().st_size))
    return sorted(jars, key=lambda jar: jar.coordinate)


def write_lock(names: Sequence[str], path: Path = LOCK_FILE) -> None:
    """Re-resolve the named sets and rewrite the lock (other sets are kept)."""
    sets = dict(read_lock(path)) if path.exists() else {}
    for name in names:
        sets[name] = tuple(resolve(name))
    lines = ["# sharestate's pinned jar sets: set, group:artifact:version, SHA-256, bytes.",
             "# Written by `python -m sharestate.jars lock` (Maven, runtime scope); do not edit."]
    for name in sorted(sets):
        lines += [f"{name}\t{jar.coordinate}\t{jar.sha256}\t{jar.size}" for jar in sets[name]]
    path.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sharestate.jars", description=__doc__)
    parser.add_argument("action", choices=("fetch", "lock", "classpath", "spark-jars", "status"),
                        help="spark-jars: the files as spark-submit's --jars list")
    parser.add_argument("sets", nargs="*", help="set names (default: every set of the lock)")
    args = parser.parse_args(argv)
    known = sorted(SETS) if args.action == "lock" else sorted(read_lock())
    names = args.sets or known
    unknown = [name for name in names if name not in known]
    if unknown:
        parser.error(f"unknown jar set {unknown[0]!r}; sets: {', '.join(known)}")
    if args.action == "lock":
        write_lock(names)
        return 0
    if args.action == "fetch":
        try:
            fetched, cached = fetch(names)
        except FetchError as error:
            print(f"sharestate.jars: {error}", file=sys.stderr)
            return 2
        print(f"jars: {fetched} fetched, {cached} already in {cache_dir()}")
        return 0
    missing = 0
    for name in names:
        found = jar_set(name)
        if args.action in ("classpath", "spark-jars"):
            try:
                classpath = found.classpath()
                print(classpath if args.action == "classpath"
                      else classpath.replace(os.pathsep, ","))
            except JarsMissing as error:
                print(f"sharestate.jars: {error}", file=sys.stderr)
                return 2
        else:
            state = "present" if found.present else f"{len(found.missing)} missing"
            print(f"{name}\t{len(found.jars)} jars\t{state}")
            missing += len(found.missing)
    return 2 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
