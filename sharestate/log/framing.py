"""Stream a log segment into batches, reporting and skipping whatever is not a batch.

`read_batches` reads the stream in chunks and keeps in memory only what the current batch
needs (bounded by `max_batch_bytes` plus one chunk), never the whole file. Each entry starts
with `baseOffset int64, length int32`; the byte at +16 is the magic. Magic 2 batches are
checked with CRC-32C over attributes..end, magic 0/1 entries with CRC-32 (see `legacy`).

Record timestamps follow Kafka's `DefaultRecordBatch`: baseTimestamp + timestampDelta, also
when the delete-horizon attribute is set (the cleaner then stores the horizon as the base
timestamp and rewrites the deltas against it); with LogAppendTime every record takes the
batch's maxTimestamp.

Bad bytes never raise: a CRC mismatch stays on the batch (`crc_valid=False` plus a
`crc_mismatch` finding) and its records are still parsed; an impossible length, an unknown
magic or a batch running past the end of the stream yields one top-level `Finding`, after
which reading resumes at the next position where a batch with a valid CRC starts. Fewer
than 17 bytes at the end yield one `trailing_bytes` finding, and a stream that fails while
being read (a corrupt or cut .gz file) ends with a `read_error` finding. Every step moves
forward.
"""

from __future__ import annotations

import io
import re
import struct
import zlib
from collections.abc import Generator, Iterator
from typing import BinaryIO

from crc32c import crc32c

from sharestate import native
from sharestate.log.batch import (
    COMPRESSION_NAMES,
    CREATE_TIME,
    DEFAULT_RAW_CAP,
    LOG_APPEND_TIME,
    Batch,
    BatchHeader,
    Finding,
    RawRecord,
)
from sharestate.log.compression import DEFAULT_MAX_INFLATED_BYTES, DecompressionError, decompress
from sharestate.log.legacy import MIN_MESSAGE_SIZE, parse_legacy
from sharestate.log.records_v2 import parse_records, wrap64

LOG_OVERHEAD = 12
"""baseOffset + length: the bytes in front of what `length` counts."""
V2_HEADER_SIZE = 61
DEFAULT_MAX_BATCH_BYTES = 64 << 20
DEFAULT_CHUNK_BYTES = 1 << 20

_V2 = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_CRC = struct.Struct(">I")
_PROBE = 17  # bytes needed to see the length and the magic
_MIN_LENGTH = (*MIN_MESSAGE_SIZE, V2_HEADER_SIZE - LOG_OVERHEAD)
_MAGIC_BYTE = re.compile(b"[\x00-\x02]")

_SCAN_BATCHES = 64  # batches per native call: keeps short-lived objects short-lived

_Problem = tuple[str, str, int | None]  # kind, message, offset


def read_batches(stream: BinaryIO, *, start_position: int = 0, end_position: int | None = None,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
                 max_raw_bytes: int = DEFAULT_RAW_CAP,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[Batch | Finding]:
    """Yield each batch of `stream` in order, and a `Finding` for each unreadable range.

    Positions count from the start of the stream. With `start_position` the stream is
    first moved there (seek, or read and discarded when it cannot seek); it must be a batch
    boundary, such as a position from the segment's offset index. `end_position` stops
    before the first batch or unreadable range starting at or after it (the one in progress
    is finished), so splits [0, a), [a, b), [b, None) at batch boundaries together read
    every batch and report every finding exactly once.
    """
    if start_position < 0 or max_batch_bytes < V2_HEADER_SIZE or max_inflated_bytes < 0 \
            or max_raw_bytes < 0 or chunk_bytes < 1:
        raise ValueError("read_batches: positions and limits must be positive")
    return _Scanner(stream, start_position, max_batch_bytes, max_inflated_bytes,
                    max_raw_bytes, chunk_bytes, end_position).run()


class _Scanner:
    """A forward-only window over the stream plus the batch-by-batch walk."""

    def __init__(self, stream: BinaryIO, start: int, max_batch: int, max_inflated: int,
                 raw_cap: int, chunk: int, stop: int | None = None) -> None:
        self.stream = stream
        self.stop = stop
        self.start = start
        self.max_batch = max_batch
        self.max_inflated = max_inflated
        self.raw_cap = raw_cap
        self.chunk = chunk
        self.buf = b""
        self.base = start  # stream position of buf[0]
        self.eof = False
        self.read_error: str | None = None

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
        """Read from the stream; a failing stream (a corrupt .gz, say) counts as its end."""
        try:
            data = self.stream.read(size)
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            self.read_error = f"{type(exc).__name__}: {exc}"
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
        parts = [self.buf[keep - self.base:]]
        have = have_end - keep
        need = end - keep
        while have < need:
            data = self._read(max(self.chunk, need - have))
            if not data:
                break
            parts.append(data)
            have += len(data)
        self.buf = b"".join(parts)
        self.base = keep
        return have >= need

    def _end(self) -> int:
        return self.base + len(self.buf)

    # -- the walk --------------------------------------------------------------------

    def run(self) -> Iterator[Batch | Finding]:
        yield from self._walk()
        if self.read_error is not None:
            end = self._end()
            yield Finding("read_error", f"the stream failed after {end} bytes: "
                          f"{self.read_error}", end, None, b"", 0)

    def _walk(self) -> Iterator[Batch | Finding]:
        self._seek_start()
        pos = self.start
        stop = self.stop
        while stop is None or pos < stop:
            if native.enabled():  # the run of clean batches buffered here, in C
                while True:
                    scanned, off = native.module.scan_v2(
                        self.buf, pos - self.base, self.base, self.max_batch, crc32c,
                        CREATE_TIME, LOG_APPEND_TIME, COMPRESSION_NAMES[0], _SCAN_BATCHES,
                        -1 if stop is None else stop)
                    pos = self.base + off
                    yield from scanned
                    if len(scanned) < _SCAN_BATCHES:
                        break
                if stop is not None and pos >= stop:
                    return
            if not self._fill(pos, pos + _PROBE):
                left = self._end() - pos
                if left > 0:
                    yield Finding.of("trailing_bytes",
                                     f"{left} bytes at the end are too short for a batch",
                                     pos, None, self.buf[pos - self.base:], self.raw_cap)
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
                                     raw_cap=self.raw_cap)
            resume = pos + size
            if not batch.header.crc_valid and not self._plausible(resume, pos):
                inner = self._find_valid(pos + 1, resume)
                if inner is not None:
                    batch.findings.append(Finding.of(
                        "bad_length", f"declared size {size} overlaps a valid batch at "
                        f"position {inner}; resuming there", pos, batch.header.base_offset,
                        b"", self.raw_cap))
                    resume = inner
            yield batch
            pos = resume

    def _frame_problem(self, magic: int, length: int) -> _Problem | None:
        if length < 0:
            return "bad_length", f"negative batch length {length}", None
        if magic > 2:
            return "unknown_magic", f"unknown magic byte {magic}", None
        if length < _MIN_LENGTH[magic]:
            return ("bad_length", f"batch length {length} is below the minimum "
                    f"{_MIN_LENGTH[magic]} for magic {magic}", None)
        if length + LOG_OVERHEAD > self.max_batch:
            return ("batch_too_large", f"batch of {length + LOG_OVERHEAD} bytes exceeds the "
                    f"limit of {self.max_batch}", None)
        return None

    def _resync(self, start: int, problem: _Problem) -> Generator[Finding, None, int | None]:
        """Report the range from `start` to the next valid batch; return where that is."""
        kind, message, offset = problem
        self._fill(start, start + self.raw_cap)
        off = start - self.base
        raw = self.buf[off:off + self.raw_cap]
        resume = self._find_valid(start + 1, None)
        stop = self._end() if resume is None else resume
        where = "no valid batch follows" if resume is None else f"resuming at {resume}"
        yield Finding(kind, f"{message}; skipped {stop - start} bytes, {where}", start,
                      offset, raw[:stop - start], stop - start)
        return resume

    def _valid_at(self, pos: int) -> bool:
        """Whether a batch with a verified CRC starts at `pos`."""
        if not self._fill(pos, pos + _PROBE):
            return False
        off = pos - self.base
        length = _PREFIX.unpack_from(self.buf, off)[1]
        magic = self.buf[off + 16]
        if magic > 2 or not _MIN_LENGTH[magic] <= length <= self.max_batch - LOG_OVERHEAD:
            return False
        end = pos + LOG_OVERHEAD + length
        if not self._fill(pos, end):
            return False
        buf = self.buf
        off = pos - self.base
        stop = off + LOG_OVERHEAD + length
        if magic == 2:
            stored, actual = _CRC.unpack_from(buf, off + 17)[0], crc32c(buf[off + 21:stop])
        else:
            stored, actual = _CRC.unpack_from(buf, off + 12)[0], zlib.crc32(buf[off + 16:stop])
        return bool(stored == actual)

    def _find_valid(self, pos: int, limit: int | None) -> int | None:
        """The first position in [pos, limit) where a valid batch starts, if any."""
        while limit is None or pos < limit:
            if not self._fill(pos, pos + _PROBE):
                return None
            match = _MAGIC_BYTE.search(self.buf, pos - self.base + 16)
            if match is None:
                pos = self._end() - 16
                continue
            pos = self.base + match.start() - 16
            if limit is not None and pos >= limit:
                return None
            if self._valid_at(pos):
                return pos
            pos += 1
        return None

    def _plausible(self, pos: int, keep: int) -> bool:
        """Whether `pos` is the end of the stream or a well-formed batch start."""
        if not self._fill(keep, pos + _PROBE):
            return self._end() == pos
        off = pos - self.base
        length = _PREFIX.unpack_from(self.buf, off)[1]
        magic = self.buf[off + 16]
        if magic > 2 or not _MIN_LENGTH[magic] <= length <= self.max_batch - LOG_OVERHEAD:
            return False
        return self._fill(keep, pos + LOG_OVERHEAD + length)

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
        findings: list[Finding] = []
        if actual_crc != crc:
            findings.append(Finding.of(
                "crc_mismatch", f"batch CRC-32C is {actual_crc}, the header says {crc}",
                position, base_offset, buf[off:end], self.raw_cap))
        records: list[RawRecord] = []
        if count == 0:  # Kafka does not look at the payload of an empty batch
            pass
        elif codec == 0:
            records, error = parse_records(buf, off + V2_HEADER_SIZE, end, count, base_offset,
                                           base_timestamp, base_sequence)
            if error is not None:
                message, at = error
                findings.append(Finding.of("bad_record", message, position + at - off,
                                           base_offset, buf[at:end], self.raw_cap))
        elif codec >= len(COMPRESSION_NAMES):
            findings.append(Finding.of("unknown_compression", f"unknown codec id {codec}",
                                       position, base_offset, buf[off:end], self.raw_cap))
        else:
            payload = buf[off + V2_HEADER_SIZE:end]
            try:
                data = decompress(COMPRESSION_NAMES[codec], payload, self.max_inflated)
            except DecompressionError as exc:
                findings.append(Finding.of(exc.kind, str(exc), position, base_offset, payload,
                                           self.raw_cap))
            else:
                records, error = parse_records(data, 0, len(data), count, base_offset,
                                               base_timestamp, base_sequence)
                if error is not None:
                    message, at = error
                    findings.append(Finding.of(
                        "bad_record", f"{message} (at byte {at} of the decompressed records)",
                        position, base_offset, data[at:], self.raw_cap))
        if attributes & 8 and records:
            records = [record._replace(timestamp=max_timestamp) for record in records]
        return Batch(header, records, findings)
