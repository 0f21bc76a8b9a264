"""What the executors run: whether their sharestate has its C extension.

An executor that imports sharestate without the extension (a wheel shipped with
`--py-files`, a build that failed on the node) still computes the same tables with the
pure-Python twins, only several times slower; a run says so rather than leave it to be
noticed in the timings. Probed with one small Spark job before the work starts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Literal

import pyarrow as pa
from pyspark.sql import SparkSession

Kernels = Literal["native", "pure", "mixed"]

PROBE = pa.schema([("native", pa.bool_()), ("module", pa.string())])


def _probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """On an executor: whether its sharestate loaded the C extension, and from where."""
    import sharestate
    from sharestate import native

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"native": [native.module is not None],
                                      "module": [sharestate.__file__]}, schema=PROBE)


def executor_kernels(spark: SparkSession) -> tuple[Kernels, list[str]]:
    """Whether the executors' sharestate runs its C extension (`native`), none of them does
    (`pure`) or some do (`mixed`), from two tasks per core; and where they import it from."""
    tasks = max(2, 2 * spark.sparkContext.defaultParallelism)
    rows = spark.range(0, tasks, 1, tasks).mapInArrow(_probe, "native boolean, module string")
    found = rows.collect()
    natives = {row["native"] for row in found}
    kernels: Kernels = "mixed" if len(natives) > 1 else "native" if True in natives else "pure"
    return kernels, sorted({row["module"] for row in found})


def warn_if_pure(kernels: Kernels) -> None:
    """One warning on stderr when executors run without the C extension."""
    if kernels != "native":
        where = "every executor" if kernels == "pure" else "some executors"
        print(f"sharestate: warning: {where} run sharestate without its C extension (pure "
              "Python, several times slower); ship it in a packed environment "
              "(python -m sharestate.spark.executor_env) rather than --py-files",
              file=sys.stderr)
