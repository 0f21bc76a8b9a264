"""Bronze rows: every record (and every finding) of a segment split as Arrow record batches.

`read_split` is what an ingest task runs on an executor: it streams one split of one
segment and yields record batches in the *staging* schema — the `log_records` columns plus
`row_kind` and the finding columns (`finding_kind`, `finding_message`, `raw`,
`raw_length`). Record rows carry a finding too when they did not decode (their `raw` is the
value, or the key when there is no value); framing findings (garbage, truncation, an
unreadable file, ...) and each batch's own findings (a refused batch, a payload that does
not inflate) are rows of their own: the findings `sharestate.records.segment` defines, read
through the same `segment_batches`, listed and counted as its `FindingCap` says (a record
row past the cap keeps its decode status but is not listed: `listed` false; the split
ends with the `omitted_findings` rows). A segment whose topic is unknown is one finding row
with topic `unknown`. The ingest job writes the record rows to `log_records` and every listed
finding to `decode_errors`, so nothing is dropped. Columns are built in bulk, not row by row.
Each batch comes with the decodings of its record rows (`Staged`), so the silver rows of
the same records need no second decode.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import compress, islice
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sharestate.log import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_FINDINGS,
    Batch,
    BatchRun,
    ControlRecord,
    LogFinding,
    RawRecord,
    ReadLimits,
    Segment,
    headers_of,
    parse_control,
    record_counts,
)
from sharestate.records.catalog import dialect
from sharestate.records.detect import SAMPLE_RECORDS, Detection, detect
from sharestate.records.keyvalue import KeyValue, decode_key_values
from sharestate.records.segment import (
    FindingCap,
    detect_segment,
    detected_batches,
    record_bytes,
    segment_batches,
)
from sharestate.tables.columns import columns_of, transpose
from sharestate.tables.spec import table

UNKNOWN_TOPIC = "unknown"
"""The topic of the finding row of a segment whose topic neither its path nor its records
tell."""
ROWS_PER_BATCH = 8_192
"""Staging rows per batch: small enough that a batch's records are still in cache when
its columns are built (a third faster than 65,536); files get larger row groups."""

_FINDING_FIELDS = [
    pa.field("row_kind", pa.string(), nullable=False),
    pa.field("finding_kind", pa.string()),
    pa.field("finding_message", pa.string()),
    pa.field("raw", pa.binary()),
    pa.field("raw_length", pa.int64()),
    pa.field("listed", pa.bool_()),
]
_NULLABLE_IN_STAGING = ("offset", "dialect", "decode_status")


def staging_schema() -> pa.Schema:
    """`log_records` columns (offset nullable, for findings) plus the finding columns."""
    fields = [f.with_nullable(True) if f.name in _NULLABLE_IN_STAGING else f
              for f in table("log_records").arrow_schema()]
    return pa.schema(fields + _FINDING_FIELDS)


STAGING = staging_schema()
_RECORD_COLUMNS = tuple(((position,), STAGING.field(name).type) for name, position in (
    ("offset", 0), ("timestamp", 1), ("key", 3), ("value", 4)))  # of a RawRecord


class Staged(NamedTuple):
    """A staging batch, and the `KeyValue` of each of its record rows (which come first)
    that is a data record (None for a control record)."""

    rows: pa.RecordBatch
    decoded: list[KeyValue | None]

_DECODED_PATHS = ((0,), (3,), (5,))  # KeyValue: type id, value version, error
_KIND = attrgetter("kind")
# BatchHeader items, by position.
_HEADER_COLUMNS = (("position", 0), ("batch_base_offset", 1), ("batch_last_offset", 2),
                   ("batch_size", 3), ("partition_leader_epoch", 4), ("magic", 5),
                   ("crc_valid", 7), ("compression", 8), ("timestamp_type", 9),
                   ("producer_id", 12), ("producer_epoch", 13), ("is_transactional", 15),
                   ("is_control", 16))
_HEADER_SPECS = tuple(((position,), STAGING.field(name).type)
                      for name, position in _HEADER_COLUMNS)


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
    """The rows of one output record batch, gathered per batch and turned into columns at
    once: record objects (native records are not GC-tracked), per-record decoded columns,
    one header per batch, and the rare findings on the side."""

    def __init__(self, names: dict[int, str], cap: FindingCap) -> None:
        self.names = names  # record type id -> record name, for the topic and dialect
        self.cap = cap  # the split's findings: which are listed
        self.records: list[Any] = []
        self.decoded: list[KeyValue | None] = []
        self.batch_index = array("i")  # each record row's index in `headers`
        self.headers: list[Any] = []
        self.type_ids: list[Any] = []
        self.versions: list[Any] = []
        self.timestamp_types: list[Any] | None = None
        self.row_findings: dict[int, tuple[str, str, bytes | None]] = {}
        self.unlisted: list[int] = []  # record rows past the cap, and their finding kinds
        self.unlisted_kinds: list[str] = []
        self.controls: dict[int, tuple[str, int | None]] = {}
        self.extra: list[dict[str, Any]] = []

    @property
    def size(self) -> int:
        return len(self.records) + len(self.extra)

    def add_batch(self, batch: Batch, decoded: list[Any]) -> None:
        """Every record of `batch` and its own findings."""
        self.add_records(batch.records, decoded, batch.header)
        for finding in batch.findings:
            self.add_finding(finding, batch.header)

    def add_clean(self, batches: list[Batch], records: list[Any],
                  decoded: list[KeyValue]) -> None:
        """Data batches without findings (the common case) at once: `records` are theirs
        end to end, `decoded` their decodings."""
        first = len(self.headers)
        counts = np.fromiter(record_counts(batches), np.int64, len(batches))
        self.batch_index.frombytes(
            np.repeat(np.arange(first, first + len(batches), dtype=np.int32), counts).tobytes())
        self.headers.extend(headers_of(batches))
        if self.timestamp_types is not None:
            self.timestamp_types.extend([None] * len(records))
        self._add_decoded(records, decoded, None)

    def add_records(self, records: list[Any], decoded: list[Any], header: Any,
                    timestamp_types: list[Any] | None = None) -> None:
        """Rows for `records` of one batch (`header` None: no batch seen, a consumer's)."""
        first = len(self.records)
        n = len(records)
        self.batch_index.extend([len(self.headers)] * n)
        self.headers.append(header)
        if timestamp_types is not None:
            if self.timestamp_types is None:
                self.timestamp_types = [None] * first
            self.timestamp_types.extend(timestamp_types)
        elif self.timestamp_types is not None:
            self.timestamp_types.extend([None] * n)
        if decoded and isinstance(decoded[0], KeyValue):
            self._add_decoded(records, decoded, header)
        else:
            self.records.extend(records)
            self.decoded.extend([None] * n)
            self.type_ids.extend([None] * n)
            self.versions.extend([None] * n)
            for j, item in enumerate(decoded):
                if isinstance(item, ControlRecord):
                    self.controls[first + j] = (item.type, item.coordinator_epoch)
                elif isinstance(item, LogFinding):
                    self._record_finding(first + j, item.kind, item.message, item.raw,
                                         header, records[j].offset)

    def _add_decoded(self, records: list[Any], decoded: list[KeyValue], header: Any) -> None:
        """Data records and their decodings (batch index and headers already added;
        `header` their batch's, None when they may be of several: it is then looked up)."""
        first = len(self.records)
        self.records.extend(records)
        self.decoded.extend(decoded)
        type_ids, versions, errors = transpose(decoded, _DECODED_PATHS)
        self.type_ids.extend(type_ids)
        self.versions.extend(versions)
        if not any(errors):  # a RecordError is true, None false: in C, as what follows
            return
        failed = list(compress(range(first, first + len(errors)), errors))
        kinds = list(map(_KIND, filter(None, errors)))

        def where(i: int) -> tuple[int, int]:
            found = header or self.headers[self.batch_index[failed[i]]]
            return -1 if found is None else found.position, self.records[failed[i]].offset

        listed = self.cap.admit_many(kinds, where)
        for at in failed[:listed]:
            error = errors[at - first]
            record = self.records[at]
            self.row_findings[at] = (error.kind, error.message, record_bytes(record))
        self.unlisted.extend(islice(failed, listed, None))
        self.unlisted_kinds.extend(islice(kinds, listed, None))

    def _record_finding(self, at: int, kind: str, message: str, raw: bytes | None,
                        header: Any, offset: int) -> None:
        """Record row `at` did not decode: a listed finding, or one past the cap (`header`
        None: a consumer's record, which has no position)."""
        if self.cap.admit(kind, -1 if header is None else header.position, offset):
            self.row_findings[at] = (kind, message, raw)
        else:
            self.unlisted.append(at)
            self.unlisted_kinds.append(kind)

    def add_finding(self, finding: LogFinding, header: Any = None, *,
                    counted: bool = True) -> None:
        """A finding that is not a record: garbage, truncation, a bad batch (unless past the
        cap; `counted` false: one that is not, a summary of those)."""
        if counted and not self.cap.admit(finding.kind, finding.position, finding.offset):
            return
        row: dict[str, Any] = {"offset": finding.offset, "row_kind": "finding",
                               "finding_kind": finding.kind,
                               "finding_message": finding.message, "raw": finding.raw,
                               "raw_length": finding.raw_length, "listed": True}
        if header is not None:
            row.update({name: header[index] for name, index in _HEADER_COLUMNS})
        row["position"] = finding.position
        self.extra.append(row)

    def _finding_columns(self, n_rec: int) -> dict[str, pa.Array]:
        """The finding columns of the record rows: the listed findings' in full, the kind
        of those past the cap (built by index: no Python step per row)."""
        found = list(self.row_findings.values())
        at = [*self.row_findings, *self.unlisted]
        index = np.full(n_rec, -1, np.int64)
        index[at] = np.arange(len(at))
        rows = pa.array(index, mask=index < 0)
        past = [None] * len(self.unlisted)
        raws = [raw for _, _, raw in found]
        values = {"finding_kind": [kind for kind, _, _ in found] + self.unlisted_kinds,
                  "finding_message": [message for _, message, _ in found] + past,
                  "raw": raws + past,
                  "raw_length": [None if raw is None else len(raw) for raw in raws] + past,
                  "listed": [True] * len(found) + [False] * len(past)}
        return {name: pa.array(column, STAGING.field(name).type).take(rows)
                for name, column in values.items()}

    def staged(self, constant: dict[str, Any], **per_row: list[Any]) -> Staged:
        """The gathered rows as one staging record batch, with their decodings."""
        return Staged(self._rows(constant, **per_row), self.decoded)

    def _rows(self, constant: dict[str, Any], **per_row: list[Any]) -> pa.RecordBatch:
        """The gathered rows as one staging record batch (built column-wise: the record
        rows first, then the findings that are not records)."""
        n_rec = len(self.records)
        extra = self.extra
        size = n_rec + len(extra)
        offsets, timestamps, keys, values = columns_of(self.records, _RECORD_COLUMNS)
        type_ids = pa.array(self.type_ids, STAGING.field("record_type_id").type)
        names = self.names
        records: dict[str, Any] = {
            "offset": offsets, "timestamp": timestamps, "key": keys, "value": values,
            "record_type_id": type_ids,
            "record_type": pa.array(list(names.values()), pa.string()).take(
                pc.index_in(type_ids, value_set=pa.array(list(names), type_ids.type))),
            "value_version": self.versions, "row_kind": pa.repeat("record", n_rec)}
        for name, rows in (("finding_kind", self.row_findings or self.unlisted),
                           ("control_type", self.controls)):
            if not rows:
                records[name] = pa.nulls(n_rec, STAGING.field(name).type)
        if self.row_findings or self.unlisted:
            records.update(self._finding_columns(n_rec))
        if self.controls:
            controls: list[Any] = [None] * n_rec
            epochs: list[Any] = [None] * n_rec
            for i, (control, epoch) in self.controls.items():
                controls[i], epochs[i] = control, epoch
            records.update(control_type=controls, coordinator_epoch=epochs)
        index = pa.array(np.frombuffer(self.batch_index, np.int32))
        for (name, _), column in zip(_HEADER_COLUMNS, columns_of(self.headers, _HEADER_SPECS),
                                     strict=True):
            records[name] = column.take(index)
        if self.timestamp_types is not None:
            records["timestamp_type"] = self.timestamp_types
        columns: dict[str, pa.Array] = {}
        for field in STAGING:
            if field.name in constant or field.name in per_row:
                continue
            part = records.get(field.name)
            if part is None:
                part = pa.nulls(n_rec, field.type)
            elif not isinstance(part, pa.Array):
                part = pa.array(part, field.type)
            if extra:
                part = pa.concat_arrays([part, pa.array([row.get(field.name) for row in extra],
                                                        field.type)])
            columns[field.name] = part
        columns["decode_status"] = pc.coalesce(columns["finding_kind"], "ok")
        for name, value in constant.items():
            columns[name] = pa.repeat(pa.scalar(value, STAGING.field(name).type), size)
        columns.update({name: pa.array(value, STAGING.field(name).type)
                        for name, value in per_row.items()})
        return pa.RecordBatch.from_arrays([columns[f.name] for f in STAGING], schema=STAGING)


def read_split(split: Split, run_id: str, *, detection: Detection | None = None,
               rows_per_batch: int = ROWS_PER_BATCH, limits: ReadLimits = DEFAULT_LIMITS
               ) -> Iterator[Staged]:
    """Stream one split as staging record batches (see the module docstring)."""
    segment = split.segment
    if detection is None and split.start == 0 and split.end is None:
        detection, items = detected_batches(segment, limits=limits, runs=True)
    else:
        if detection is None:
            detection = detect_segment(segment, limits=limits)
        items = segment_batches(segment, detection, start=split.start, end=split.end,
                                limits=limits, runs=True)
    topic = detection.topic or UNKNOWN_TOPIC
    schemas = dialect(detection.dialect)
    names = _record_names(detection.dialect, topic)
    constant = {"source": split.source, "topic": topic,
                "partition": -1 if segment.partition is None else segment.partition,
                "segment": segment.base_offset or 0, "dialect": detection.dialect,
                "ingest_run": run_id}
    cap = FindingCap(limits.max_findings, split.source)
    chunk = _Chunk(names, cap)
    clean: list[Batch] = []  # data batches without findings, added together
    records: list[RawRecord] = []

    def add_clean() -> None:
        chunk.add_clean(clean, records, decode_key_values(schemas, topic, records))
        clean.clear()
        records.clear()

    staged = 0  # rows in `chunk` (the clean records are not in it yet)
    for item in items:
        if isinstance(item, BatchRun):
            clean.extend(item.batches)
            records.extend(item.records)
        elif not (isinstance(item, LogFinding) or item.header.is_control or item.findings):
            clean.append(item)
            records.extend(item.records)
        else:
            if clean:
                add_clean()
            if isinstance(item, LogFinding):
                chunk.add_finding(item)
            else:
                chunk.add_batch(item, (
                    [parse_control(r, item.header) for r in item.records]
                    if item.header.is_control
                    else decode_key_values(schemas, topic, item.records)))
            staged = chunk.size
        if staged + len(records) >= rows_per_batch:
            if clean:
                add_clean()
            yield chunk.staged(constant)
            chunk = _Chunk(names, cap)
            staged = 0
    if clean:
        add_clean()
    for summary in cap.summary():
        chunk.add_finding(summary, counted=False)
    if chunk.size:
        yield chunk.staged(constant)


def _record_names(dialect_name: str, topic: str) -> dict[int, str]:
    return {type_id: kind.name
            for type_id, kind in dialect(dialect_name).topics.get(topic, {}).items()}


LIVE_CHUNK = 1_000_000
"""Offsets per bronze `segment` of the live source: a re-run replaces whole chunks."""


def chunk_of(offset: int) -> int:
    """The live-source chunk (its first offset) holding `offset`."""
    return offset - offset % LIVE_CHUNK


def consumer_rows(raw: Iterator[pa.RecordBatch], run_id: str, source: str,
                  dialect_name: str | None = None, max_findings: int = DEFAULT_MAX_FINDINGS
                  ) -> Iterator[Staged]:
    """Staging batches for rows read by a consumer (the live source's raw schema).

    A consumer sees no batch headers and no control batches, so those columns stay null;
    each topic-partition's dialect is detected from its first rows (or pinned), and its
    findings are listed up to `max_findings`, as a segment's are (`FindingCap`).
    """
    detections: dict[tuple[str, int], Detection] = {}
    caps: dict[tuple[str, int], FindingCap] = {}
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
            cap = caps.setdefault((topic, partition), FindingCap(max_findings, source))
            chunk = _Chunk(_record_names(detection.dialect, topic), cap)
            chunk.add_records(records, decode_key_values(dialect(detection.dialect), topic,
                                                         records), None,
                              [columns["timestamp_type"][j] for j in range(start, i)])
            segments = [chunk_of(o) for o in columns["offset"][start:i]]
            yield chunk.staged({"source": source, "topic": topic, "partition": partition,
                               "dialect": detection.dialect, "ingest_run": run_id},
                              segment=segments)
            start = i
    for (topic, partition), cap in caps.items():
        summaries = cap.summary()
        if not summaries:
            continue
        chunk = _Chunk(_record_names(detections[(topic, partition)].dialect, topic), cap)
        for summary in summaries:
            chunk.add_finding(summary, counted=False)
        yield chunk.staged({"source": source, "topic": topic, "partition": partition,
                            "dialect": detections[(topic, partition)].dialect,
                            "ingest_run": run_id},
                           segment=[chunk_of(f.offset or 0) for f in summaries])
