"""The Python workers' daemon on a local master: pyspark's own, importing pyspark from the
installed package instead of from Spark's zip.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on its Python
workers' path. Python cannot cache the bytecode of modules it imports from a zip, so the
daemon and every worker it forks compiled pyspark's modules from source again: about
0.35 s of the daemon's start and 0.1-0.3 s of each worker's first task, on the critical
path of every run's first job. On a local master `$SPARK_HOME` is the installed pyspark,
whose zip holds the same release as the package beside it, so this daemon moves the zips
behind the installed package (only when they lie inside it) and then runs pyspark's
daemon unchanged. `build_session` names it (`spark.python.daemon.module`) for local
masters only: a cluster's executors keep their Spark's zip.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder


def installed_first(path: list[str]) -> list[str]:
    """`path` with pyspark's and py4j's zips moved last when they lie inside the pyspark
    package the rest of `path` imports; else `path` unchanged."""
    zips = [entry for entry in path if entry.endswith(".zip")
            and os.path.basename(entry).startswith(("pyspark", "py4j"))]
    rest = [entry for entry in path if entry not in zips]
    spec = PathFinder.find_spec("pyspark", rest)
    if not zips or spec is None or not spec.submodule_search_locations:
        return path
    package = os.path.realpath(next(iter(spec.submodule_search_locations))) + os.sep
    if not all(os.path.realpath(entry).startswith(package) for entry in zips):
        return path
    return rest + zips


if __name__ == "__main__":
    sys.path[:] = installed_first(sys.path)
    from pyspark import daemon

    daemon.manager()
