"""Bronze rows: every record (and every finding) of a segment split as Arrow record batches.

`read_split` is what an ingest task runs on an executor: it streams one split of one
segment and yields record batches in the *staging* schema — the `log_records` columns plus
`row_kind` and the finding columns (`finding_kind`, `finding_message`, `raw`,
`raw_length`). Record rows carry a finding too when they did not decode (their `raw` is the
value, or the key when there is no value); framing findings (garbage, truncation, ...) are
rows of their own. The ingest job writes the record rows to `log_records` and every finding
to `decode_errors`, so nothing is dropped. Columns are built in bulk, not row by row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sharestate.log import (
    Batch,
    ControlRecord,
    Finding,
    RawRecord,
    Segment,
    parse_control,
    read_batches,
)
from sharestate.records.catalog import dialect
from sharestate.records.detect import SAMPLE_RECORDS, Detection, detect
from sharestate.records.keyvalue import KeyValue, decode_key_values
from sharestate.records.segment import detect_segment
from sharestate.tables.columns import transpose
from sharestate.tables.spec import table

ROWS_PER_BATCH = 65_536

_FINDING_FIELDS = [
    pa.field("row_kind", pa.string(), nullable=False),
    pa.field("finding_kind", pa.string()),
    pa.field("finding_message", pa.string()),
    pa.field("raw", pa.binary()),
    pa.field("raw_length", pa.int64()),
]
_NULLABLE_IN_STAGING = ("offset", "dialect", "decode_status")


def staging_schema() -> pa.Schema:
    """`log_records` columns (offset nullable, for findings) plus the finding columns."""
    fields = [f.with_nullable(True) if f.name in _NULLABLE_IN_STAGING else f
              for f in table("log_records").arrow_schema()]
    return pa.schema(fields + _FINDING_FIELDS)


STAGING = staging_schema()

# RawRecord items (offset, timestamp, key, value) and BatchHeader items, by position.
_RECORD_PATHS = ((0,), (1,), (3,), (4,))
_HEADER_COLUMNS = (("position", 0), ("batch_base_offset", 1), ("batch_last_offset", 2),
                   ("batch_size", 3), ("partition_leader_epoch", 4), ("magic", 5),
                   ("crc_valid", 7), ("compression", 8), ("timestamp_type", 9),
                   ("producer_id", 12), ("producer_epoch", 13), ("is_transactional", 15),
                   ("is_control", 16))


@dataclass(frozen=True)
class Split:
    """A byte range of one segment (`end` None: to the end), starting at a batch boundary."""

    segment: Segment
    start: int = 0
    end: int | None = None

    @property
    def source(self) -> str:
        return str(self.segment.path)


class _Chunk:
    """Column lists of one output record batch.

    Only plain values (ints, strings, bytes) are kept between batches: holding many decoded
    tuples alive would make Python's cyclic GC rescan them over and over.
    """

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {f.name: [] for f in STAGING}
        self.size = 0

    def add_batch(self, batch: Batch, decoded: list[Any]) -> None:
        header = batch.header
        crc = next((f for f in batch.findings if f.kind == "crc_mismatch"), None)
        self.add_records(batch.records, decoded,
                         {name: header[index] for name, index in _HEADER_COLUMNS},
                         None, crc)
        for finding in batch.findings:
            if finding.kind != "crc_mismatch":
                self.add_finding(finding, batch)

    def add_findings_of(self, batch: Batch, decoded: list[Any]) -> None:
        """Only the rows of `batch` that carry a finding."""
        header = batch.header
        crc = next((f for f in batch.findings if f.kind == "crc_mismatch"), None)
        bad = [i for i, d in enumerate(decoded) if crc is not None or isinstance(d, Finding)
               or (isinstance(d, KeyValue) and d.error is not None)]
        if bad:
            self.add_records([batch.records[i] for i in bad], [decoded[i] for i in bad],
                             {name: header[index] for name, index in _HEADER_COLUMNS}, None,
                             crc)
        for finding in batch.findings:
            if finding.kind != "crc_mismatch":
                self.add_finding(finding, batch)

    def add_records(self, records: list[RawRecord], decoded: list[Any],
                    header_values: dict[str, Any], timestamp_types: list[Any] | None,
                    crc: Finding | None = None) -> None:
        """Rows for `records` (decoded alike), with per-batch values repeated."""
        n = len(records)
        columns = self.columns
        offsets, timestamps, keys, values = transpose(records, _RECORD_PATHS)
        columns["offset"].extend(offsets)
        columns["timestamp"].extend(timestamps)
        columns["key"].extend(keys)
        columns["value"].extend(values)
        for item, record in zip(decoded, records, strict=True):
            kind = message = raw = type_id = name = version = control = epoch = None
            if isinstance(item, KeyValue):
                type_id, version = item.type_id, item.value_version
                name = item.kind.name if item.kind is not None else None
                if item.error is not None:
                    kind, message = item.error.kind, item.error.message
                    raw = record.value if record.value is not None else record.key
            elif isinstance(item, ControlRecord):
                control, epoch = item.type, item.coordinator_epoch
            else:
                kind, message, raw = item.kind, item.message, item.raw
            if kind is None and crc is not None:
                kind, message = crc.kind, crc.message
            columns["record_type_id"].append(type_id)
            columns["record_type"].append(name)
            columns["value_version"].append(version)
            columns["control_type"].append(control)
            columns["coordinator_epoch"].append(epoch)
            columns["finding_kind"].append(kind)
            columns["finding_message"].append(message)
            columns["raw"].append(raw)
            columns["raw_length"].append(None if raw is None else len(raw))
        columns["row_kind"].extend(["record"] * n)
        for name, value in header_values.items():
            columns[name].extend([value] * n)
        if timestamp_types is not None:
            columns["timestamp_type"][-n:] = timestamp_types
        self.size += n

    def add_finding(self, finding: Finding, batch: Batch | None = None) -> None:
        columns = self.columns
        row = {"offset": finding.offset, "row_kind": "finding", "finding_kind": finding.kind,
               "finding_message": finding.message, "raw": finding.raw,
               "raw_length": finding.raw_length}
        if batch is not None:
            row.update({name: batch.header[index] for name, index in _HEADER_COLUMNS})
        row["position"] = finding.position
        for name in _ROW_COLUMNS:
            columns[name].append(row.get(name))
        self.size += 1

    def batch(self, constant: dict[str, Any], **per_row: list[Any]) -> pa.RecordBatch:
        columns = self.columns
        columns["decode_status"] = [k or "ok" for k in columns["finding_kind"]]
        for name, value in constant.items():
            columns[name] = [value] * self.size
        columns.update(per_row)
        return pa.RecordBatch.from_pydict(columns, schema=STAGING)


_ROW_COLUMNS = ("offset", "timestamp", "key", "value", "record_type_id", "record_type",
                "value_version", "control_type", "coordinator_epoch", "row_kind",
                "finding_kind", "finding_message", "raw", "raw_length",
                *(name for name, _ in _HEADER_COLUMNS))


def read_split(split: Split, run_id: str, *, detection: Detection | None = None,
               rows_per_batch: int = ROWS_PER_BATCH,
               findings_only: bool = False) -> Iterator[pa.RecordBatch]:
    """Stream one split as staging record batches (see the module docstring).

    `findings_only` yields just the rows that carry a finding (what `decode_errors` gets),
    skipping the work of building the rows of every good record.
    """
    segment = split.segment
    if detection is None:
        detection = detect_segment(segment)
    schemas = dialect(detection.dialect)
    constant = {"source": split.source, "topic": detection.topic,
                "partition": -1 if segment.partition is None else segment.partition,
                "segment": segment.base_offset or 0, "dialect": detection.dialect,
                "ingest_run": run_id}
    chunk = _Chunk()
    with segment.open() as stream:
        for item in read_batches(stream, start_position=split.start, end_position=split.end):
            if isinstance(item, Finding):
                chunk.add_finding(item)
            else:
                decoded: list[Any] = (
                    [parse_control(r, item.header) for r in item.records]
                    if item.header.is_control
                    else decode_key_values(schemas, detection.topic, item.records))
                if findings_only:
                    chunk.add_findings_of(item, decoded)
                else:
                    chunk.add_batch(item, decoded)
            if chunk.size >= rows_per_batch:
                yield chunk.batch(constant)
                chunk = _Chunk()
    if chunk.size:
        yield chunk.batch(constant)


LIVE_CHUNK = 1_000_000
"""Offsets per bronze `segment` of the live source: a re-run replaces whole chunks."""


def chunk_of(offset: int) -> int:
    """The live-source chunk (its first offset) holding `offset`."""
    return offset - offset % LIVE_CHUNK


def consumer_rows(raw: Iterator[pa.RecordBatch], run_id: str, source: str,
                  dialect_name: str | None = None) -> Iterator[pa.RecordBatch]:
    """Staging batches for rows read by a consumer (the live source's raw schema).

    A consumer sees no batch headers and no control batches, so those columns stay null;
    each topic-partition's dialect is detected from its first rows (or pinned).
    """
    detections: dict[tuple[str, int], Detection] = {}
    for batch in raw:
        columns = {name: batch.column(name).to_pylist() for name in
                   ("topic", "partition", "offset", "timestamp", "timestamp_type", "key",
                    "value")}
        n = batch.num_rows
        start = 0
        for i in range(1, n + 1):
            if i < n and columns["topic"][i] == columns["topic"][start] \
                    and columns["partition"][i] == columns["partition"][start]:
                continue
            topic, partition = columns["topic"][start], columns["partition"][start]
            records = [RawRecord(columns["offset"][j], columns["timestamp"][j], -1,
                                 columns["key"][j], columns["value"][j], ())
                       for j in range(start, i)]
            detection = detections.get((topic, partition))
            if detection is None:
                detection = detections[(topic, partition)] = detect(
                    ((r.key, r.value) for r in records[:SAMPLE_RECORDS]), topic=topic,
                    dialect_name=dialect_name)
            chunk = _Chunk()
            header_values = {name: None for name, _ in _HEADER_COLUMNS}
            chunk.add_records(records, decode_key_values(dialect(detection.dialect), topic,
                                                         records), header_values,
                              [columns["timestamp_type"][j] for j in range(start, i)])
            segments = [chunk_of(o) for o in columns["offset"][start:i]]
            yield chunk.batch({"source": source, "topic": topic, "partition": partition,
                               "dialect": detection.dialect, "ingest_run": run_id},
                              segment=segments)
            start = i
