"""Executor side of `Lake.overwrite_many` on a backend that writes through Spark: one pass of
a task's `produce`, its rows held as Arrow IPC streams, then each table's rows again.

`stage` runs `produce` and yields, per table, its rows as compressed Arrow IPC streams of up
to `STAGE_ROWS` rows, one `STAGED` row each: a Spark cache of those holds a few large
values, not every row column by column, so caching them costs a copy, not a conversion.
`unstage` turns one table's streams back into Arrow batches for Spark's writer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from sharestate.lake.base import Produce

STAGED = pa.schema([("table", pa.string()), ("rows", pa.binary())])
"""A staged chunk: the target table's name and its rows as one Arrow IPC stream."""
STAGE_ROWS = 65_536
"""Rows per staged chunk (a table's rows from one task are gathered up to this)."""
_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


def stage(batches: Iterator[pa.RecordBatch], *, produce: Produce,
          columns: Mapping[str, Sequence[str]]) -> Iterator[pa.RecordBatch]:
    """Run `produce` over a task's input; yield its rows (each table's `columns`, in
    order) as `STAGED` chunks."""
    pending: dict[str, list[pa.RecordBatch]] = {}
    counts: dict[str, int] = {}
    for name, rows in produce(batches):
        if not rows.num_rows:
            continue
        pending.setdefault(name, []).append(rows.select(list(columns[name])))
        counts[name] = counts.get(name, 0) + rows.num_rows
        if counts[name] >= STAGE_ROWS:
            yield _chunk(name, pending.pop(name))
            counts[name] = 0
    for name, held in pending.items():
        yield _chunk(name, held)


def _chunk(name: str, batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema, options=_IPC) as writer:
        for batch in batches:
            writer.write_batch(batch)
    stream = sink.getvalue()
    offsets = pa.array([0, stream.size], pa.int32()).buffers()[1]
    return pa.RecordBatch.from_arrays([pa.array([name], pa.string()),
                                       pa.Array.from_buffers(pa.binary(), 1,
                                                             [None, offsets, stream])],
                                      schema=STAGED)


def unstage(chunks: Iterator[pa.RecordBatch], *, schema: pa.Schema
            ) -> Iterator[pa.RecordBatch]:
    """The rows of staged chunks (their `rows` column) as batches of `schema`."""
    for chunk in chunks:
        for stream in chunk.column("rows"):
            with pa.ipc.open_stream(stream.as_buffer()) as reader:
                for batch in reader:
                    yield batch.cast(schema) if batch.schema != schema else batch
