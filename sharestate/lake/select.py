"""Choosing the Delta backend for a SparkSession."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sharestate.lake.base import Lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BACKENDS = ("auto", "rs", "jvm")
BACKEND_CONF = "spark.sharestate.lake.backend"
DELTA_CLASS = "io.delta.tables.DeltaTable"


def delta_classes_loaded(spark: SparkSession) -> bool:
    """Whether the session's JVM can load Delta's classes (False without a local JVM)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(DELTA_CLASS))


def open_lake(spark: SparkSession, backend: str | None = None) -> Lake:
    """The lake for `spark`: `backend`, else the session's `spark.sharestate.lake.backend`.

    `auto` (the default) picks `jvm` when Delta's classes are on the classpath, else `rs`.
    """
    name = backend or spark.conf.get(BACKEND_CONF, "auto") or "auto"
    if name not in BACKENDS:
        raise ValueError(f"unknown lake backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        name = "jvm" if delta_classes_loaded(spark) else "rs"
    if name == "jvm":
        from sharestate.lake.jvm import JvmLake

        return JvmLake(spark)
    from sharestate.lake.rs import RsLake

    return RsLake(spark)
