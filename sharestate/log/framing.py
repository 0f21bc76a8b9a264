"""Stream a log segment into batches, reporting and skipping whatever is not a batch.

`read_batches` reads the stream in chunks and keeps in memory only what the current batch
needs (bounded by `max_batch_bytes` plus one chunk), never the whole file. Each entry starts
with `baseOffset int64, length int32`; the byte at +16 is the magic. Magic 2 batches are
checked with CRC-32C over attributes..end, magic 0/1 entries with CRC-32 (see `legacy`).

Record timestamps follow Kafka's `DefaultRecordBatch`: baseTimestamp + timestampDelta, also
when the delete-horizon attribute is set (the cleaner then stores the horizon as the base
timestamp and rewrites the deltas against it); with LogAppendTime every record takes the
batch's maxTimestamp.

Bad bytes never raise. A batch whose CRC does not match is refused as Kafka's loader
refuses it: it comes with no records and a `crc_mismatch` finding holding its bytes. So is
a batch declaring more records than `max_batch_records` (`too_many_records`, nothing
decompressed or parsed). A record count that disagrees with the payload is a `bad_record`
finding, as it is an error for Kafka's record iterator: fewer records than declared (the
records read are kept; the finding holds the batch, whose header declares them), bytes
left after the declared ones (kept too), or a batch declaring none that holds bytes after
its header (Kafka's iterator does not look at those: nothing is read of them, but they are
reported). A record that does not parse is a `bad_record` finding too; the records after it
are read when its length or its fields frame it and they parse to the batch's end
(`parse_batch_records`), else those before it are all that is kept; a payload that fails
to inflate keeps the records of its frames that ended whole before the fault. An impossible
length, an unknown magic or a batch running past the end of the stream yields one top-level
`LogFinding`, after which reading resumes at the next position where an intact batch starts
(`resync`: cheap header checks on every byte, a CRC only where they pass). A refused
batch's length is not trusted either: an intact batch starting inside it ends it there
(`bad_length`), so a wrong length hides nothing; and bytes that fail their CRC, do not pass
the header checks and do not end where another entry (or the stream) does are `garbage` up
to the next intact batch. Fewer than 17 bytes at the end yield one `trailing_bytes`
finding. Zero bytes from a batch boundary to the end, at least 17 of them (no batch has
length 0), are the unwritten tail of a preallocated segment (`log.preallocate`: Kafka
trims the file only when the segment rolls or the broker stops, so a running broker's
active segment has one): the log ends there, with no finding. A stream that fails while
being read (a cut .gz file, a file larger than a
segment can be) ends with a finding of the kind the stream names (`read_error` otherwise).
Every step moves forward.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import zlib
from collections.abc import Generator, Iterator
from itertools import chain
from typing import BinaryIO, Literal, overload

from crc32c import crc32c

from sharestate import native
from sharestate.log.batch import (
    COMPRESSION_NAMES,
    CREATE_TIME,
    DEFAULT_RAW_CAP,
    LOG_APPEND_TIME,
    Batch,
    BatchHeader,
    BatchRun,
    LogFinding,
    RawRecord,
)
from sharestate.log.checksums import running_crc32, running_crc32c
from sharestate.log.compression import DEFAULT_MAX_INFLATED_BYTES, DecompressionError, decompress
from sharestate.log.legacy import parse_legacy
from sharestate.log.order import SEGMENT_SPAN, OffsetOrder, in_order
from sharestate.log.records_v2 import parse_batch_records, wrap64
from sharestate.log.resync import (
    LEGACY_KEY_AT,
    MIN_LENGTH,
    V2_WINDOW,
    check_at,
    next_candidate,
)
from sharestate.log.resync import LOG_OVERHEAD as LOG_OVERHEAD  # re-exported: the entry prefix

V2_HEADER_SIZE = 61
DEFAULT_MAX_BATCH_BYTES = 64 << 20
DEFAULT_MAX_BATCH_RECORDS = 100_000
"""Records one batch may declare. Kafka's coordinators write batches of at most about
1 MiB (their append buffer), which holds fewer records than this; a batch declaring more
is refused before anything is inflated, so a small hostile batch cannot fill memory with
records."""
DEFAULT_MAX_FINDINGS = 1000
"""Findings of one segment listed one by one, each in full; past them each kind is counted,
and the segment ends with one `omitted_findings` finding per kind saying how many (a
segment of 60 batches of 100,000 records that do not decode made 6 M findings that every
reader held, 1.3 GB; and a warehouse's `decode_errors` as many rows)."""
DEFAULT_CHUNK_BYTES = 1 << 20

_V2 = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_PROBE = 17  # bytes needed to see the length and the magic
_SCAN_BYTES = 1 << 16  # bytes read ahead while looking for the next batch

_SCAN_BATCHES = 64  # batches per native call: keeps short-lived objects short-lived

_Problem = tuple[str, str, int | None]  # kind, message, offset


@dataclasses.dataclass(frozen=True)
class ReadLimits:
    """What one batch may take: bytes, inflated bytes, records; how many offending bytes a
    finding keeps; and how many findings of one segment are listed one by one
    (`sharestate.records.segment.FindingCap`: the rest are counted per kind)."""

    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES
    max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS
    max_raw_bytes: int = DEFAULT_RAW_CAP
    max_findings: int = DEFAULT_MAX_FINDINGS


DEFAULT_LIMITS = ReadLimits()


@overload
def read_batches(stream: BinaryIO, *, start_position: int = 0, end_position: int | None = None,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
                 max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
                 max_raw_bytes: int = DEFAULT_RAW_CAP,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 source: str | None = None,
                 order: OffsetOrder | None = None,
                 runs: Literal[False] = False) -> Iterator[Batch | LogFinding]: ...


@overload
def read_batches(stream: BinaryIO, *, start_position: int = 0, end_position: int | None = None,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
                 max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
                 max_raw_bytes: int = DEFAULT_RAW_CAP,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 source: str | None = None,
                 order: OffsetOrder | None = None,
                 runs: bool) -> Iterator[Batch | LogFinding | BatchRun]: ...


def read_batches(stream: BinaryIO, *, start_position: int = 0, end_position: int | None = None,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
                 max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
                 max_raw_bytes: int = DEFAULT_RAW_CAP,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 source: str | None = None,
                 order: OffsetOrder | None = None,
                 runs: bool = False) -> Iterator[Batch | LogFinding | BatchRun]:
    """Yield each batch of `stream` in order, and a `LogFinding` for each unreadable range
    (each naming `source` as where it was found). With `runs`, consecutive batches that
    the native scanner found clean and in order may come as one `BatchRun` instead.

    Every batch passes `order` (see `sharestate.log.order`; a new one when None): a batch
    whose offsets go back is refused with an `offset_order` finding. A partition's log
    passes one order through its segments; the stream is one segment of it.

    Positions count from the start of the stream. With `start_position` the stream is
    first moved there (seek, or read and discarded when it cannot seek); it must be a batch
    boundary, such as a position from the segment's offset index. `end_position` stops
    before the first batch or unreadable range starting at or after it (the one in progress
    is finished), so splits [0, a), [a, b), [b, None) at batch boundaries together read
    every batch and report every finding exactly once.
    """
    if start_position < 0 or max_batch_bytes < V2_HEADER_SIZE or max_inflated_bytes < 0 \
            or max_batch_records < 0 or max_raw_bytes < 0 or chunk_bytes < 1:
        raise ValueError("read_batches: positions and limits must be positive")
    if order is None:
        order = OffsetOrder()
    order.new_segment()
    return _Scanner(stream, start_position, max_batch_bytes, max_inflated_bytes,
                    max_batch_records, max_raw_bytes, chunk_bytes, end_position, source,
                    order, runs).run()


class _Scanner:
    """A forward-only window over the stream plus the batch-by-batch walk."""

    def __init__(self, stream: BinaryIO, start: int, max_batch: int, max_inflated: int,
                 max_records: int, raw_cap: int, chunk: int, stop: int | None,
                 source: str | None, order: OffsetOrder, runs: bool) -> None:
        self.stream = stream
        self.order = order
        self.runs = runs
        self.source = source
        self.stop = stop
        self.start = start
        self.max_batch = max_batch
        self.max_inflated = max_inflated
        self.max_records = max_records
        self.raw_cap = raw_cap
        self.chunk = chunk
        self.buf = b""
        self.base = start  # stream position of buf[0]
        self.eof = False
        self.read_error: tuple[str, str] | None = None  # finding kind, message
        self.crc32c = running_crc32c()  # the CRCs of resynchronisation's candidates
        self.crc32 = running_crc32()
        self.last_nonzero = -1  # stream position of the last non-zero byte read so far

    # -- the window ------------------------------------------------------------------

    def _seek_start(self) -> None:
        if self.start == 0:
            return
        try:
            if self.stream.seekable():
                self.stream.seek(self.start)
                return
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
        left = self.start
        while left > 0:
            data = self._read(min(left, self.chunk))
            if not data:
                return
            left -= len(data)

    def _read(self, size: int) -> bytes:
        """Read from the stream; a failing stream (a cut .gz, say) counts as its end. The
        error's `kind` attribute, when it has one, names the finding."""
        try:
            data = self.stream.read(size)
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            self.read_error = (getattr(exc, "kind", "read_error"),
                               f"{type(exc).__name__}: {exc}" if not hasattr(exc, "kind")
                               else str(exc))
            data = b""
        if not data:
            self.eof = True
        return data

    def _fill(self, keep: int, end: int) -> bool:
        """Make stream bytes [keep, end) available in `buf`, dropping those before `keep`.

        False when the stream ends first (then `buf` holds everything up to its end).
        """
        have_end = self.base + len(self.buf)
        if end <= have_end:
            return True
        if self.eof:
            return False
        # what the candidates' CRC checkpoints need is kept too (at most a few KiB more)
        keep = max(self.base, min(keep, self.crc32c.keep_from(keep), self.crc32.keep_from(keep)))
        parts = [self.buf[keep - self.base:]]
        have = have_end - keep
        need = end - keep
        while have < need:
            data = self._read(max(self.chunk, need - have))
            if not data:
                break
            if written := len(data.rstrip(b"\0")):
                self.last_nonzero = keep + have + written - 1
            parts.append(data)
            have += len(data)
        self.buf = b"".join(parts)
        self.base = keep
        return have >= need

    def _end(self) -> int:
        return self.base + len(self.buf)

    # -- the walk --------------------------------------------------------------------

    def run(self) -> Iterator[Batch | LogFinding | BatchRun]:
        yield from in_order(self._walk(), self.order, self._raw, self.source)
        if self.read_error is not None:
            kind, reason = self.read_error
            end = self._end()
            yield LogFinding(kind, f"reading stopped after {end} bytes: {reason}", end, None,
                          b"", 0, self.source)

    def _sourced(self, item: Batch | LogFinding) -> Batch | LogFinding:
        """`item` with its findings naming the source (only the Python walk finds any)."""
        if self.source is None:
            return item
        if isinstance(item, LogFinding):
            return dataclasses.replace(item, source=self.source)
        if item.findings:
            return Batch(item.header, item.records,
                         [dataclasses.replace(f, source=self.source) for f in item.findings])
        return item

    def _raw(self, batch: Batch) -> bytes:
        """The first bytes of `batch`, the latest item walked (so still in `buf`)."""
        off = batch.header.position - self.base
        return self.buf[off:off + min(batch.header.size_in_bytes, self.raw_cap)]

    def _walk(self) -> Iterator[Batch | LogFinding | BatchRun]:
        self._seek_start()
        pos = self.start
        stop = self.stop
        while stop is None or pos < stop:
            if native.enabled():  # the run of clean batches buffered here, in C
                while True:
                    order = self.order  # as `in_order` left it, having taken every item
                    scanned, off, ordered = native.module.scan_v2(
                        self.buf, pos - self.base, self.base, self.max_batch, self.max_records,
                        crc32c, CREATE_TIME, LOG_APPEND_TIME, COMPRESSION_NAMES[0],
                        _SCAN_BATCHES, -1 if stop is None else stop,
                        order.last if self.runs else None, order.segment_first, SEGMENT_SPAN)
                    pos = self.base + off
                    if ordered:
                        run = scanned[:ordered]
                        yield BatchRun(run, list(chain.from_iterable(
                            [batch.records for batch in run])))
                        yield from scanned[ordered:]
                    else:
                        yield from scanned
                    if len(scanned) < _SCAN_BATCHES:
                        break
                if stop is not None and pos >= stop:
                    return
            if not self._fill(pos, pos + _PROBE):
                left = self._end() - pos
                if left > 0:
                    yield LogFinding.of("trailing_bytes",
                                     f"{left} bytes at the end are too short for a batch",
                                     pos, None, self.buf[pos - self.base:], self.raw_cap,
                                     self.source)
                return
            off = pos - self.base
            base_offset, length = _PREFIX.unpack_from(self.buf, off)
            magic = self.buf[off + 16]
            size = length + LOG_OVERHEAD
            problem = self._frame_problem(magic, length)
            if problem is None and not self._fill(pos, pos + size):
                problem = ("truncated_batch",
                           f"batch at offset {base_offset} declares {size} bytes but only "
                           f"{self._end() - pos} remain", base_offset)
            if problem is not None:
                resume = yield from self._resync(pos, problem)
                if resume is None:
                    return
                pos = resume
                continue
            off = pos - self.base
            if magic == 2:
                batch = self._parse_v2(off, pos, size)
            else:
                batch = parse_legacy(self.buf, off, pos, size,
                                     max_inflated_bytes=self.max_inflated,
                                     max_records=self.max_records, raw_cap=self.raw_cap)
            if not batch.header.crc_valid:  # its length is no more trusted than its bytes
                if check_at(self.buf, off, True, self.max_batch) != 1 \
                        and not self._ends_well(pos, pos + size):
                    resume = yield from self._resync(pos, (
                        "garbage", f"{size} bytes that fail their CRC and do not begin as a "
                        f"batch Kafka writes", None))
                    if resume is None:
                        return
                    pos = resume
                    continue
                inner = self._find_valid(pos + 1, pos + size)
                if inner is not None:
                    refused = batch.findings[0]
                    yield LogFinding(
                        "bad_length", f"batch at offset {base_offset} declares {size} bytes "
                        f"and its CRC does not match, but an intact batch starts at "
                        f"{inner}: skipped {inner - pos} bytes, resuming there", pos,
                        base_offset, refused.raw[:inner - pos], inner - pos, self.source)
                    pos = inner
                    continue
            yield self._sourced(batch)
            pos += size

    def _ends_well(self, pos: int, end: int) -> bool:
        """Whether the stream ends at `end` or an entry there passes the header checks
        (bytes from `pos` on are kept)."""
        self._fill(pos, end + V2_WINDOW)
        if self._end() == end:
            return True
        return check_at(self.buf, end - self.base, self.eof, self.max_batch) == 1

    def _frame_problem(self, magic: int, length: int) -> _Problem | None:
        if length < 0:
            return "bad_length", f"negative batch length {length}", None
        if magic > 2:
            return "unknown_magic", f"unknown magic byte {magic}", None
        if length < MIN_LENGTH[magic]:
            return ("bad_length", f"batch length {length} is below the minimum "
                    f"{MIN_LENGTH[magic]} for magic {magic}", None)
        if length + LOG_OVERHEAD > self.max_batch:
            return ("batch_too_large", f"batch of {length + LOG_OVERHEAD} bytes exceeds the "
                    f"limit of {self.max_batch}", None)
        return None

    def _resync(self, start: int, problem: _Problem) -> Generator[LogFinding, None, int | None]:
        """Report the range from `start` to the next valid batch; return where that is."""
        kind, message, offset = problem
        self._fill(start, start + self.raw_cap)
        off = start - self.base
        raw = self.buf[off:off + self.raw_cap]
        resume = self._find_valid(start + 1, None)
        stop = self._end() if resume is None else resume
        if resume is None and self.read_error is None and self.last_nonzero < start \
                and stop - start >= _PROBE:
            return None  # a preallocated segment's unwritten tail: the log ends here
        where = "no valid batch follows" if resume is None else f"resuming at {resume}"
        yield LogFinding(kind, f"{message}; skipped {stop - start} bytes, {where}", start,
                      offset, raw[:stop - start], stop - start, self.source)
        return resume

    def _find_valid(self, pos: int, limit: int | None) -> int | None:
        """The first position in [pos, limit) where an intact batch starts, if any: where
        the cheap header checks pass (`resync`) and then the whole entry checks out."""
        while limit is None or pos < limit:
            if not self._fill(pos, pos + _SCAN_BYTES) and self._end() <= pos:
                return None
            end = len(self.buf) if limit is None else min(len(self.buf), limit - self.base)
            found, at = next_candidate(self.buf, pos - self.base, end, self.eof,
                                       self.max_batch)
            pos = self.base + at
            if found:
                if self._valid_at(pos):
                    return pos
                pos += 1
            elif self.eof and pos >= self._end():
                return None
        return None

    def _valid_at(self, pos: int) -> bool:
        """Whether the entry at `pos` (its header passed the cheap checks) is whole, ends
        where a legacy message's value length says, and its CRC matches (the CRC last)."""
        off = pos - self.base
        length = _INT32.unpack_from(self.buf, off + 8)[0]
        magic = self.buf[off + 16]
        end = pos + LOG_OVERHEAD + length
        if magic != 2:
            key_at = pos + LEGACY_KEY_AT[magic]
            value_at = key_at + 4 + max(_INT32.unpack_from(self.buf, key_at - self.base)[0], 0)
            if not self._fill(pos, value_at + 4):
                return False
            value_length = _INT32.unpack_from(self.buf, value_at - self.base)[0]
            if value_length < -1 or value_at + 4 + max(value_length, 0) != end:
                return False
        if not self._fill(pos, end):
            return False
        off = pos - self.base
        if magic == 2:  # from checkpoints: candidates' ranges overlap (see `checksums`)
            return bool(_CRC.unpack_from(self.buf, off + 17)[0]
                        == self.crc32c.of_range(self.buf, self.base, pos + 21, end))
        return bool(_CRC.unpack_from(self.buf, off + 12)[0]
                    == self.crc32.of_range(self.buf, self.base, pos + 16, end))

    # -- magic 2 ---------------------------------------------------------------------

    def _parse_v2(self, off: int, position: int, size: int) -> Batch:
        buf = self.buf
        (base_offset, _length, leader_epoch, _magic, crc, attributes, last_delta,
         base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
         count) = _V2.unpack_from(buf, off)
        end = off + size
        actual_crc = crc32c(memoryview(buf)[off + 21:end])
        codec = attributes & 7
        last_offset = wrap64(base_offset + last_delta)
        header = BatchHeader(
            position, base_offset, last_offset, size, leader_epoch, 2, crc, actual_crc == crc,
            COMPRESSION_NAMES[codec] if codec < len(COMPRESSION_NAMES) else "unknown",
            LOG_APPEND_TIME if attributes & 8 else CREATE_TIME, base_timestamp, max_timestamp,
            producer_id, producer_epoch, base_sequence, bool(attributes & 16),
            bool(attributes & 32), count, bool(attributes & 64))
        findings: list[LogFinding] = []
        records: list[RawRecord] = []
        if actual_crc != crc:
            findings.append(LogFinding.of(
                "crc_mismatch", f"batch CRC-32C is {actual_crc}, the header says {crc}: "
                f"{_its_records(count, base_offset, last_offset)} not read (Kafka refuses a "
                f"corrupt batch)", position, base_offset, buf[off:end], self.raw_cap))
        elif count > self.max_records:
            findings.append(LogFinding.of(
                "too_many_records", f"batch declares {count} records, more than the limit of "
                f"{self.max_records}: not read", position, base_offset, buf[off:end],
                self.raw_cap))
        elif count == 0:
            if end > off + V2_HEADER_SIZE:  # Kafka's iterator reads nothing of it either
                findings.append(LogFinding.of(
                    "bad_record", f"batch declares 0 records but holds "
                    f"{end - off - V2_HEADER_SIZE} bytes after its header: not read",
                    position + V2_HEADER_SIZE, base_offset, buf[off + V2_HEADER_SIZE:end],
                    self.raw_cap))
        elif codec == 0:
            records, error = parse_batch_records(buf, off + V2_HEADER_SIZE, end, count,
                                                 base_offset, base_timestamp, base_sequence,
                                                 last_delta)
            if error is not None:
                message, at = error
                if at == end:  # no byte left: the header's count is what is wrong
                    at = off
                findings.append(LogFinding.of("bad_record", message, position + at - off,
                                           base_offset, buf[at:end], self.raw_cap))
        elif codec >= len(COMPRESSION_NAMES):
            findings.append(LogFinding.of("unknown_compression", f"unknown codec id {codec}",
                                       position, base_offset, buf[off:end], self.raw_cap))
        else:
            payload = buf[off + V2_HEADER_SIZE:end]
            try:
                data = decompress(COMPRESSION_NAMES[codec], payload, self.max_inflated)
            except DecompressionError as exc:  # the records of its whole frames are read
                records = parse_batch_records(exc.inflated, 0, len(exc.inflated), count,
                                              base_offset, base_timestamp, base_sequence,
                                              last_delta)[0] if exc.inflated else []
                read = f"; the {len(records)} records of the whole frames before it are read"
                findings.append(LogFinding.of(exc.kind, f"{exc}{read if records else ''}",
                                           position, base_offset, payload, self.raw_cap))
            else:
                records, error = parse_batch_records(data, 0, len(data), count, base_offset,
                                                     base_timestamp, base_sequence, last_delta)
                if error is not None:
                    message, at = error
                    findings.append(LogFinding.of(
                        "bad_record", f"{message} (at byte {at} of the decompressed records)",
                        position, base_offset, data[at:] or buf[off:end], self.raw_cap))
        if attributes & 8 and records:
            records = [record._replace(timestamp=max_timestamp) for record in records]
        return Batch(header, records, findings)


def _its_records(count: int, first: int, last: int) -> str:
    """What a refused batch held, as its header says."""
    if count == 1:
        return f"its record (offset {first}) is"
    return f"its {count} records (offsets {first} to {last}) are"
