"""Decode whole segments: batches from `sharestate.log`, keys/values from the catalog.

This is the one place that says what a segment's findings are, for every command and the
pipeline: each framing finding of `read_segment` (garbage, truncation, an unreadable file),
each batch's own findings (a refused batch, a payload that does not inflate), and one per
record that does not decode (`record_finding`). A segment whose topic no record tells
gives one `unknown_topic` finding and its records are not decoded, but its bytes' findings
still come (`segment_batches`). A segment lists its first `ReadLimits.max_findings`
findings in full, in log order (a batch's records' before its own); the rest `FindingCap`
counts per kind, and the segment ends with one `omitted_findings` finding per kind saying
how many, so memory and every sink stay bounded and nothing goes unsaid.

`decode_segment` streams one segment and yields a `DecodedRecord` per record and per
finding that is not a record's, in log order, so nothing is dropped. The segment's topic
and dialect are detected from a sample of its own records unless the caller pins them; the
`Detection` is available before the first record is yielded.
"""

from __future__ import annotations

import base64
import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import accumulate, chain, islice
from operator import attrgetter, itemgetter
from typing import Any, Literal, NamedTuple, overload

from sharestate.log import (
    DEFAULT_LIMITS,
    Batch,
    BatchHeader,
    BatchRun,
    ControlRecord,
    LogFinding,
    RawRecord,
    ReadLimits,
    Segment,
    headers_of,
    parse_control,
    read_segment,
    record_counts,
)
from sharestate.log.order import OffsetOrder
from sharestate.records.catalog import Dialect, dialect
from sharestate.records.detect import SAMPLE_RECORDS, Detection, detect
from sharestate.records.keyvalue import KeyValue, RecordError, decode_key_values
from sharestate.records.render import to_json


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """One line of output: a decoded record, a control record, or a finding; `finding` is
    set on exactly the lines that are findings (a record that did not decode is one)."""

    topic: str | None
    partition: int | None
    offset: int | None
    timestamp: int | None
    batch: BatchHeader | None
    kv: KeyValue | None
    control: ControlRecord | None
    finding: LogFinding | None
    position: int | None
    raw_key: bytes | None
    raw_value: bytes | None
    listed: bool = True
    """Whether `finding` is one of the segment's listed findings (else it is past the cap
    and counted in an `omitted_findings` finding)."""

    @property
    def ok(self) -> bool:
        return self.finding is None

    @property
    def error(self) -> RecordError | None:
        return None if self.finding is None else RecordError(self.finding.kind,
                                                             self.finding.message)


def _sample(segment: Segment, limits: ReadLimits) -> Iterator[tuple[bytes | None,
                                                                    bytes | None]]:
    for item in read_segment(segment, limits=limits):
        if isinstance(item, Batch) and not item.header.is_control:
            for record in item.records:
                yield record.key, record.value


def detect_segment(segment: Segment, *, dialect_name: str | None = None,
                   topic: str | None = None, limits: ReadLimits = DEFAULT_LIMITS
                   ) -> Detection:
    """Detect (or confirm) the topic and dialect of one segment."""
    pinned_topic = topic or segment.topic
    if pinned_topic and dialect_name:
        return Detection(pinned_topic, dialect_name, 0, {}, forced=True)
    return detect(islice(_sample(segment, limits), SAMPLE_RECORDS), topic=pinned_topic,
                  dialect_name=dialect_name)


Decoded = KeyValue | ControlRecord | LogFinding
"""What one record decodes to: a data record's `KeyValue` (its `error` says why one failed),
a control record's `ControlRecord`, or a `LogFinding` when a control record is malformed."""


HELD_ITEMS = 1024
"""Items `detected_batches` holds while it gathers its sample (a finding's bytes are capped,
4 KiB by default); a segment whose sample lies further is detected in a pass of its own."""


@overload
def detected_batches(segment: Segment, *, limits: ReadLimits = DEFAULT_LIMITS,
                     held_items: int = HELD_ITEMS, runs: Literal[False] = False
                     ) -> tuple[Detection, Iterator[Batch | LogFinding]]: ...


@overload
def detected_batches(segment: Segment, *, limits: ReadLimits = DEFAULT_LIMITS,
                     held_items: int = HELD_ITEMS, runs: bool
                     ) -> tuple[Detection, Iterator[Batch | LogFinding | BatchRun]]: ...


def detected_batches(segment: Segment, *, limits: ReadLimits = DEFAULT_LIMITS,
                     held_items: int = HELD_ITEMS, runs: bool = False
                     ) -> tuple[Detection, Iterator[Batch | LogFinding | BatchRun]]:
    """`detect_segment` and `segment_batches` of the whole segment in one read: the items
    read while the sample is gathered are held and given back first (a segment without
    records, or all damage, is not read twice). The same as the two calls."""
    items = read_segment(segment, limits=limits, runs=runs)
    held: list[Batch | LogFinding | BatchRun] = []
    sample: list[tuple[bytes | None, bytes | None]] = []
    for item in items:
        held.append(item)
        if isinstance(item, BatchRun) or (isinstance(item, Batch)
                                          and not item.header.is_control):
            sample.extend((record.key, record.value)
                          for record in islice(item.records, SAMPLE_RECORDS - len(sample)))
        if len(sample) >= SAMPLE_RECORDS:
            break
        if len(held) >= held_items:
            detection = detect_segment(segment, limits=limits)
            return detection, segment_batches(segment, detection, limits=limits, runs=runs)
    detection = detect(sample, topic=segment.topic, dialect_name=None)
    stream = chain(held, items)
    return detection, (stream if detection.topic is not None
                       else _unknown_topic(segment, detection, stream, 0))


@overload
def segment_batches(segment: Segment, detection: Detection, *, start: int = 0,
                    end: int | None = None, limits: ReadLimits = DEFAULT_LIMITS,
                    order: OffsetOrder | None = None, runs: Literal[False] = False
                    ) -> Iterator[Batch | LogFinding]: ...


@overload
def segment_batches(segment: Segment, detection: Detection, *, start: int = 0,
                    end: int | None = None, limits: ReadLimits = DEFAULT_LIMITS,
                    order: OffsetOrder | None = None, runs: bool
                    ) -> Iterator[Batch | LogFinding | BatchRun]: ...


def segment_batches(segment: Segment, detection: Detection, *, start: int = 0,
                    end: int | None = None, limits: ReadLimits = DEFAULT_LIMITS,
                    order: OffsetOrder | None = None, runs: bool = False
                    ) -> Iterator[Batch | LogFinding | BatchRun]:
    """`read_segment` for a segment detected as `detection`: when its topic is unknown, the
    segment (unless empty or unreadable) is one `unknown_topic` finding instead. `order`:
    the offset order of the partition log the segment is part of (None: the segment is
    read on its own); `runs`: see `read_batches`."""
    items = read_segment(segment, start=start, end=end, limits=limits, order=order, runs=runs)
    return items if detection.topic is not None else _unknown_topic(segment, detection, items,
                                                                     start)


def _unknown_topic(segment: Segment, detection: Detection,
                   items: Iterator[Batch | LogFinding | BatchRun],
                   start: int) -> Iterator[LogFinding]:
    """The findings of a segment whose topic is unknown: one `unknown_topic` (its records
    are not decoded), then those of its bytes, which need no topic (a truncation, garbage,
    a refused batch), each with its position and bytes."""
    told = start != 0  # a later split of the segment: its first one tells
    for item in items:
        if isinstance(item, LogFinding) and item.kind == "unreadable_segment":
            yield item
            return
        if not told:
            yield LogFinding("unknown_topic", f"{detection.describe()}: the segment is not read",
                          0, None, b"", 0, str(segment.path))
            told = True
        if isinstance(item, LogFinding):
            yield item
        elif isinstance(item, Batch):
            yield from item.findings


class FindingCap:
    """The findings of one segment (or split, or a live partition: `unit`) as its readers
    list them: the first `limit` in full, the rest counted per kind (see the module
    docstring)."""

    __slots__ = ("left", "limit", "omitted", "source", "unit")

    def __init__(self, limit: int, source: str | None, unit: str = "segment") -> None:
        self.limit = limit
        self.left = limit
        self.source = source
        self.unit = unit
        self.omitted: dict[str, list[Any]] = {}  # kind -> [count, first position, offset]

    def admit(self, kind: str, position: int, offset: int | None) -> bool:
        """Whether the next finding is listed; if not, it is counted."""
        if self.left > 0:
            self.left -= 1
            return True
        seen = self.omitted.get(kind)
        if seen is None:
            self.omitted[kind] = [1, position, offset]
        else:
            seen[0] += 1
        return False

    def admit_many(self, kinds: list[str], where: Callable[[int], tuple[int, int | None]]
                   ) -> int:
        """`admit` for the next findings at once, of `kinds` in log order: how many of the
        first are listed; the rest are counted per kind (`where(i)`: the position and offset
        of the `i`th, asked for the first of a kind not counted before). No Python step per
        finding past the cap."""
        listed = min(len(kinds), self.left)
        self.left -= listed
        rest = kinds[listed:]
        for kind, count in Counter(rest).items():  # kinds in order of first appearance
            seen = self.omitted.get(kind)
            if seen is None:
                self.omitted[kind] = [count, *where(listed + rest.index(kind))]
            else:
                seen[0] += count
        return listed

    def omitted_count(self) -> int:
        """How many findings were counted, not listed."""
        return sum(count for count, _, _ in self.omitted.values())

    def summary(self) -> list[LogFinding]:
        """One `omitted_findings` finding per kind counted, at the first one's place (a
        consumed record has no position: its offset)."""
        return [LogFinding(
            "omitted_findings", f"{count} more {kind} finding{'' if count == 1 else 's'} "
            f"in this {self.unit}, from "
            + (f"offset {offset}" if position < 0 and offset is not None else
               f"position {position}{'' if offset is None else f' (offset {offset})'}")
            + f" on, not listed one by one: a {self.unit} lists {self.limit} (--max-findings)",
            position, offset, b"", 0, self.source)
            for kind, (count, position, offset) in self.omitted.items()]


def record_finding(header: BatchHeader, record: RawRecord, decoded: Decoded,
                   source: str | None) -> LogFinding | None:
    """The finding of one record that did not decode (None when it did): its error, the
    batch's position, the record's offset and its bytes (`record_bytes`)."""
    if isinstance(decoded, ControlRecord):
        return None
    if isinstance(decoded, LogFinding):
        return decoded if decoded.source == source else dataclasses.replace(decoded,
                                                                             source=source)
    error = decoded.error
    if error is None:
        return None
    return LogFinding.of(error.kind, error.message, header.position, record.offset,
                      record_bytes(record) or b"", source=source)


def record_bytes(record: RawRecord) -> bytes | None:
    """The bytes a record's finding holds: its value, else (null or empty) its key."""
    return record.value or record.key


class DecodedBatch(NamedTuple):
    """A batch with every record decoded: `decoded[i]` belongs to `records[i]`.

    Data records decode to a `KeyValue` (its `error` says why one failed), control
    records to a `ControlRecord`, or to a `LogFinding` when the control record is malformed.
    `findings` are the batch's own (from the log layer), `failed` the `record_finding` of
    each record that did not decode, in log order: those its segment lists (`FindingCap`);
    `omitted` counts the batch's findings past the cap (records' first).
    """

    header: BatchHeader
    records: list[RawRecord]
    decoded: list[Decoded]
    findings: list[LogFinding]
    failed: tuple[LogFinding, ...] = ()
    omitted: int = 0


class QuietRun(NamedTuple):
    """Consecutive batches outside transactions holding only data records and no findings,
    taken as one: their records and decodings end to end, batch `i` ending before record
    `ends[i]`. The share replay applies such a run in one step; `batches()` gives it back
    batch by batch."""

    headers: list[BatchHeader]
    records: list[RawRecord]
    decoded: list[Decoded]
    ends: list[int]

    def batches(self) -> Iterator[DecodedBatch]:
        start = 0
        for header, end in zip(self.headers, self.ends, strict=True):
            yield DecodedBatch(header, self.records[start:end], self.decoded[start:end], [])
            start = end


_ERROR = itemgetter(5)  # KeyValue.error

LogItem = DecodedBatch | QuietRun | LogFinding
"""What a replay reads, in log order: a log's batches, some gathered into runs."""


QUIET_RUN_RECORDS = 512
"""Records gathered into one `QuietRun`, about. Small runs are faster than large ones (the
records of a run stay in cache between decode and apply): replaying segments, 512 is 1.3x
as fast as 65,536 and as fast as 128."""


def quiet_runs(items: Iterator[LogItem]) -> Iterator[LogItem]:
    """`items` with each stretch of batches outside transactions, without control records
    or findings, gathered into `QuietRun`s (the runs among them passed on as they are)."""
    batches: list[DecodedBatch] = []
    records: list[RawRecord] = []
    decoded: list[Any] = []

    def run() -> QuietRun:
        gathered = QuietRun([b.header for b in batches], records.copy(), decoded.copy(),
                            list(accumulate(len(b.records) for b in batches)))
        batches.clear()
        records.clear()
        decoded.clear()
        return gathered

    for item in items:
        if isinstance(item, QuietRun):  # gathered as read (`decode_batches` with runs)
            if batches:
                yield run()
            yield item
            continue
        if isinstance(item, DecodedBatch) and item.records and not item.findings \
                and not item.failed and not item.omitted and not item.header.is_transactional \
                and not item.header.is_control:
            batches.append(item)
            records.extend(item.records)
            decoded.extend(item.decoded)
            if len(records) >= QUIET_RUN_RECORDS:
                yield run()
            continue
        if batches:
            yield run()
        yield item
    if batches:
        yield run()


@overload
def decode_batches(segment: Segment, detection: Detection, *,
                   limits: ReadLimits = DEFAULT_LIMITS, order: OffsetOrder | None = None,
                   runs: Literal[False] = False) -> Iterator[DecodedBatch | LogFinding]: ...


@overload
def decode_batches(segment: Segment, detection: Detection, *,
                   limits: ReadLimits = DEFAULT_LIMITS, order: OffsetOrder | None = None,
                   runs: bool) -> Iterator[LogItem]: ...


def decode_batches(segment: Segment, detection: Detection, *,
                   limits: ReadLimits = DEFAULT_LIMITS, order: OffsetOrder | None = None,
                   runs: bool = False) -> Iterator[LogItem]:
    """Stream `segment` batch by batch under `detection`'s topic and dialect (`order`: as
    for `segment_batches`), its findings past `limits.max_findings` counted (`FindingCap`)
    and summed up at its end. With `runs`, a run the reader gathered (`BatchRun`) that is
    quiet and decodes without a finding comes as one `QuietRun`, decoded in one call."""
    topic = detection.topic
    schemas = dialect(detection.dialect)
    source = str(segment.path)
    cap = FindingCap(limits.max_findings, source)
    for read in segment_batches(segment, detection, limits=limits, order=order, runs=runs):
        if isinstance(read, LogFinding):
            if cap.admit(read.kind, read.position, read.offset):
                yield read
            continue
        assert topic is not None
        if isinstance(read, BatchRun):
            quiet = _quiet_runs(read, schemas, topic)
            if quiet is not None:
                yield from quiet
                continue
        for item in read.batches if isinstance(read, BatchRun) else (read,):
            yield _decoded_batch(item, schemas, topic, cap, source)
    yield from cap.summary()


_TRANSACTIONAL = attrgetter("is_transactional")


def _quiet_runs(run: BatchRun, schemas: Dialect, topic: str) -> list[QuietRun] | None:
    """`run` as `QuietRun`s of about `QUIET_RUN_RECORDS` records (as `quiet_runs` cuts
    them) when it is quiet: outside transactions, every batch holding records, every record
    decoding (None: it is taken batch by batch)."""
    headers = list(headers_of(run.batches))
    counts = list(record_counts(run.batches))
    if any(map(_TRANSACTIONAL, headers)) or not all(counts):
        return None
    values = decode_key_values(schemas, topic, run.records)
    if any(map(_ERROR, values)):
        return None
    decoded: list[Decoded] = list(values)
    ends = list(accumulate(counts))
    runs, first, start = [], 0, 0  # the next run's first batch and first record
    for i, end in enumerate(ends, 1):
        if end - start >= QUIET_RUN_RECORDS or i == len(ends):
            runs.append(QuietRun(headers[first:i], run.records[start:end], decoded[start:end],
                                 [e - start for e in ends[first:i]]))
            first, start = i, end
    return runs


def _decoded_batch(item: Batch, schemas: Dialect, topic: str, cap: FindingCap,
                   source: str) -> DecodedBatch:
    """One batch decoded, its findings and its records' admitted to the cap."""
    header, records = item.header, item.records
    decoded: list[Decoded]
    if header.is_control:
        decoded = [parse_control(record, header) for record in records]
        bad = any(isinstance(d, LogFinding) for d in decoded)
    else:
        values = decode_key_values(schemas, topic, records)
        bad = any(map(_ERROR, values))  # at C speed: most batches have no error
        decoded = list(values)
    failed: list[LogFinding] = []
    omitted = 0
    if bad:
        for record, outcome in zip(records, decoded, strict=True):
            kind = failure_kind(outcome)
            if kind is None:
                continue
            if cap.admit(kind, header.position, record.offset):
                finding = record_finding(header, record, outcome, source)
                assert finding is not None
                failed.append(finding)
            else:
                omitted += 1
    own = [f for f in item.findings if cap.admit(f.kind, f.position, f.offset)]
    omitted += len(item.findings) - len(own)
    return DecodedBatch(header, records, decoded, own, tuple(failed), omitted)


def failure_kind(decoded: Decoded) -> str | None:
    """The finding kind of a record that did not decode (None when it did)."""
    if isinstance(decoded, LogFinding):
        return decoded.kind
    if isinstance(decoded, ControlRecord) or decoded.error is None:
        return None
    return decoded.error.kind


def decode_segment(segment: Segment, detection: Detection, *,
                   limits: ReadLimits = DEFAULT_LIMITS, order: OffsetOrder | None = None
                   ) -> Iterator[DecodedRecord]:
    """Stream `segment` as one `DecodedRecord` per record or finding, in log order
    (`order`: as for `segment_batches`)."""
    topic = detection.topic
    partition = segment.partition
    for item in decode_batches(segment, detection, limits=limits, order=order):
        if isinstance(item, LogFinding):
            yield _finding_record(topic, partition, item, None)
            continue
        header = item.header
        source = str(segment.path)
        # one per record that did not decode, in order: the listed ones, then those past
        # the cap (their rows still say why)
        failures = iter(item.failed)
        for record, decoded in zip(item.records, item.decoded, strict=True):
            if isinstance(decoded, ControlRecord):
                yield DecodedRecord(topic, partition, record.offset, record.timestamp, header,
                                    None, decoded, None, header.position, record.key,
                                    record.value)
                continue
            if failure_kind(decoded) is None:
                failed = None
                listed = True
            else:
                failed = next(failures, None)
                listed = failed is not None
                if failed is None:
                    failed = record_finding(header, record, decoded, source)
            if isinstance(decoded, LogFinding):
                assert failed is not None
                yield _finding_record(topic, partition, failed, header, record.offset,
                                      record.timestamp, listed)
            else:
                yield DecodedRecord(topic, partition, record.offset, record.timestamp, header,
                                    decoded, None, failed, header.position, record.key,
                                    record.value, listed)
        for finding in item.findings:  # the batch's own, after the records it still gave
            yield _finding_record(topic, partition, finding, header)


def _finding_record(topic: str | None, partition: int | None, finding: LogFinding,
                    header: BatchHeader | None, offset: int | None = None,
                    timestamp: int | None = None, listed: bool = True) -> DecodedRecord:
    return DecodedRecord(topic, partition, finding.offset if offset is None else offset,
                         timestamp, header, None, None, finding, finding.position,
                         finding.raw, None, listed)


def record_json(record: DecodedRecord) -> dict[str, Any]:
    """The stable JSON-lines shape of `sharestate decode`."""
    header = record.batch
    kv = record.kv
    kind = kv.kind if kv else None
    key = value = None
    if kv is not None and kind is not None:
        if kv.key is not None:
            key = to_json(kind.key_layout(), kv.key)
        if kv.value is not None and kv.value_version is not None:
            layout = kind.value_layout(kv.value_version)
            value = to_json(layout, kv.value) if layout else None
    error: dict[str, Any] | None = None
    if record.finding is not None:
        error = {"kind": record.finding.kind, "message": record.finding.message}
        if record.position is not None:
            error["position"] = record.position
        if kv is None and record.raw_key is not None and record.control is None:
            error["raw"] = base64.b64encode(record.raw_key).decode("ascii")
        elif kv is not None:
            error["raw_key"] = _b64(record.raw_key)
            error["raw_value"] = _b64(record.raw_value)
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": header.timestamp_type if header else None,
        "batch": _batch_json(header) if header else None,
        "record_type": kv.record_type if kv else None,
        "record_type_id": kv.type_id if kv else None,
        "key": key,
        "value_version": kv.value_version if kv else None,
        "value": value,
        "control": ({"type": record.control.type, "coordinator_epoch":
                     record.control.coordinator_epoch} if record.control else None),
        "error": error,
    }


def finding_json(finding: LogFinding, topic: str | None, partition: int | None
                 ) -> dict[str, Any]:
    """The JSON-lines shape of a finding, the same for every command (`--findings`)."""
    return {
        "source": finding.source,
        "topic": topic,
        "partition": partition,
        "offset": finding.offset,
        "position": finding.position,
        "kind": finding.kind,
        "message": finding.message,
        "raw": base64.b64encode(finding.raw).decode("ascii"),
        "raw_length": finding.raw_length,
    }


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _batch_json(header: BatchHeader) -> dict[str, Any]:
    return {
        "base_offset": header.base_offset,
        "last_offset": header.last_offset,
        "partition_leader_epoch": header.partition_leader_epoch,
        "magic": header.magic,
        "crc": header.crc,
        "crc_valid": header.crc_valid,
        "compression": header.compression,
        "is_transactional": header.is_transactional,
        "is_control": header.is_control,
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "base_sequence": header.base_sequence,
    }
