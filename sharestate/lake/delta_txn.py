"""delta-spark's transaction, driven through py4j: commit data files the executors wrote.

Delta's DataFrame writer turns every row from Arrow into a JVM row, collects its statistics
and encodes it with parquet-mr, where the executors' pyarrow writes the same files from the
Arrow batches they hold (the pipeline took 9 times as long on delta-spark's writer as on
`rs`, issue 24). So the `jvm` backend has its executors write the Parquet files
(`sharestate.lake.direct`, as `rs` does) and commits them with the transaction that writer
ends with: `DeltaLog.startTransaction()`, a remove action per active file of the replaced
partitions and an add action per new file (parsed by Delta from the log's own JSON form),
`commit(actions, DeltaOperations.Write(...))`. The replaced files are listed from the log
of the version the transaction read by the caller (the `jvm` backend asks delta-rs):
`filterFiles()` rebuilds the table's state in a Spark job on every commit, 2-3 s of a
tiny table's commit of 2.5 s on the loaded 2-core machine, 0.25 s without. Delta checks the
protocol, records the operation (`WRITE`, its mode, partitioning, predicate and
`userMetadata`), refuses a commit whose removed files another commit removed first, and
runs its post-commit hooks (checksum, checkpoint) as for any write. Having read no files
through the transaction, it does not see a concurrent commit adding files to a partition
being replaced: the warehouse lease (`sharestate.lake.lease`) keeps writers one at a time.

These are delta-spark's internal Scala classes, so `DeltaTransactions.open` checks this
JVM has them as used here (delta-spark 4.x) and says None otherwise; and only a table its
plain Parquet files fully describe (writer protocol 2 or lower, no table features, no
column invariants) is committed this way. Anything else goes through Delta's writer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sharestate.lake.data_files import DataFile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sharestate.lake.rs import ReplacedFile

WRITE_OPERATION = "org.apache.spark.sql.delta.DeltaOperations$Write"
WRITE_ARGUMENTS = 9
"""`DeltaOperations.Write`'s constructor in delta-spark 4.x: mode, partitionBy, predicate,
userMetadata and five options left empty."""
PLAIN_WRITER_VERSION = 2
"""The newest writer protocol whose rules plain Parquet files and Delta's commit checks
meet (append-only and NOT NULL: checked here and by the commit)."""


class DeltaTransactions:
    """delta-spark's transaction API in one session's JVM."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        jvm = spark._jvm
        assert jvm is not None
        self._jvm = jvm
        self._delta = jvm.org.apache.spark.sql.delta
        self._convert = jvm.scala.jdk.javaapi.CollectionConverters

    @classmethod
    def open(cls, spark: SparkSession) -> DeltaTransactions | None:
        """The transaction API of `spark`'s Delta, or None where its classes differ from
        those this module drives (another Delta release, no local JVM)."""
        jvm = getattr(spark, "_jvm", None)
        if jvm is None:
            return None
        utils = jvm.org.apache.spark.util.Utils
        if not utils.classIsLoadable(WRITE_OPERATION):
            return None
        write = utils.classForName(WRITE_OPERATION, True, False)
        if not any(len(c.getParameterTypes()) == WRITE_ARGUMENTS
                   for c in write.getConstructors()):
            return None
        return cls(spark)

    def writable(self, root: str) -> bool:
        """Whether plain Parquet files and this commit meet the table's protocol: writer
        version 2 or lower, no table features, no column invariants."""
        snapshot = self._log(root).update(False, self._none(), self._none())
        protocol = snapshot.protocol()
        features = protocol.writerFeatures()
        if protocol.minWriterVersion() > PLAIN_WRITER_VERSION or (
                features.isDefined() and not features.get().isEmpty()):
            return False
        schema = json.loads(snapshot.metadata().schemaString())
        return not any("delta.invariants" in (field.get("metadata") or {})
                       for field in schema.get("fields", ()))

    def commit(self, root: str, files: Sequence[DataFile],
               replaced: Callable[[int], Sequence[ReplacedFile]] | None, *,
               partition_by: Sequence[str], predicate: str | None,
               user_metadata: str | None) -> int:
        """Commit `files` (paths relative to the table, unescaped) to the table at `root`,
        removing the files `replaced(version)` names, of the version the transaction read
        (None: an append); the committed version."""
        txn = self._log(root).startTransaction()
        actions = [self._add(file) for file in files]
        if replaced is not None:
            now = int(time.time() * 1000)
            actions += [self._remove(file, now) for file in replaced(int(txn.readVersion()))]
        mode = self._jvm.org.apache.spark.sql.SaveMode
        write = getattr(self._delta, "DeltaOperations$Write")
        operation = write(mode.Overwrite if replaced is not None else mode.Append,
                          self._some(self._seq(partition_by)), self._option(predicate),
                          self._option(user_metadata), *(self._none(),) * 5)
        return int(txn.commit(self._seq(actions), operation))

    def _add(self, file: DataFile) -> Any:
        """Delta's add action for a written file (its path URI-encoded, as Delta's writer
        records a path whose folder names Spark escaped)."""
        return self._delta.actions.Action.fromJson(json.dumps({"add": {
            "path": self._uri(file.path), "partitionValues": dict(file.partition_values),
            "size": file.size,
            "modificationTime": file.modification_time, "dataChange": True,
            "stats": file.stats}}))

    def _remove(self, file: ReplacedFile, now: int) -> Any:
        """Delta's remove action for an active file, as `AddFile.remove` makes it."""
        return self._delta.actions.Action.fromJson(json.dumps({"remove": {
            "path": self._uri(file.path), "deletionTimestamp": now, "dataChange": True,
            "extendedFileMetadata": True, "partitionValues": dict(file.partition_values),
            "size": file.size}}))

    def _uri(self, path: str) -> str:
        """A path relative to the table as Delta's writer records it (URI-encoded)."""
        return str(self._jvm.org.apache.hadoop.fs.Path(path).toUri().toString())

    def _log(self, root: str) -> Any:
        return self._delta.DeltaLog.forTable(self.spark._jsparkSession, root)

    def _seq(self, items: Iterable[Any]) -> Any:
        values = self._jvm.java.util.ArrayList()
        for item in items:
            values.add(item)
        return self._convert.asScala(values).toList()

    def _option(self, value: Any) -> Any:
        return self._jvm.scala.Option.apply(value)

    def _some(self, value: Any) -> Any:
        return self._jvm.scala.Some(value)

    def _none(self) -> Any:
        return self._jvm.scala.Option.empty()
