"""Choosing the Delta backend for a SparkSession."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sharestate.arguments import BACKEND_CONF as BACKEND_CONF  # the lake's setting, named once
from sharestate.arguments import BACKENDS as BACKENDS
from sharestate.lake.base import Lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_CLASS = "io.delta.tables.DeltaTable"


class BackendError(ValueError):
    """The Delta backend asked for cannot run in this session: an unknown name, or `jvm`
    without Delta's classes on the classpath. A setting to fix, not a bug: one line."""


def delta_classes_loaded(spark: SparkSession) -> bool:
    """Whether the session's JVM can load Delta's classes (False without a local JVM)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(DELTA_CLASS))


def open_lake(spark: SparkSession, backend: str | None = None) -> Lake:
    """The lake for `spark`: `backend`, else the session's `spark.sharestate.lake.backend`.

    `auto` (the default) picks `jvm` when Delta's classes are on the classpath, else `rs`.
    Raises `BackendError` for an unknown name, or `jvm` where Delta's classes are missing.
    """
    name = backend or spark.conf.get(BACKEND_CONF, "auto") or "auto"
    if name not in BACKENDS:
        raise BackendError(f"unknown lake backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        name = "jvm" if delta_classes_loaded(spark) else "rs"
    elif name == "jvm" and not delta_classes_loaded(spark):
        raise BackendError(
            f"the jvm lake backend needs Delta's jars on Spark's classpath ({DELTA_CLASS} "
            "cannot be loaded): run `make jars` (the pinned Delta), or add --packages "
            "io.delta:delta-spark_4.2_2.13:4.4.0 or --conf spark.jars=..., or use "
            f"{BACKEND_CONF}=rs")
    if name == "jvm":
        from sharestate.lake.jvm import JvmLake

        return JvmLake(spark)
    from sharestate.lake.rs import RsLake

    return RsLake(spark)
