"""The byte streams of segment files: bounded by what the file and Kafka allow, and for
`.log.gz` files decompressed so that every byte before a failure is delivered.

A Kafka segment is at most 2 GiB - 1 bytes (`log.segment.bytes` is an int, and offset
index positions are int32), and a plain file holds what its size said when it was opened.
Reading stops there; a file that goes on (a huge sparse file) ends with a
`segment_too_large` error after the bytes a segment can hold. A gzip stream is inflated
member after member as it is read; a cut, corrupt or trailing-garbage stream raises only
once everything inflated before the fault has been read, with the byte counts.
"""

from __future__ import annotations

import io
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

MAX_SEGMENT_BYTES = (1 << 31) - 1
"""The largest segment Kafka writes."""

_GZIP_MAGIC = b"\x1f\x8b"
_INPUT_CHUNK = 1 << 16


def _salvage(inflater: zlib._Decompress, data: bytes) -> tuple[bytes, int]:
    """What `inflater` gives of `data` before the byte it fails at (fed a byte at a time:
    a failing call of zlib's gives nothing), and where that byte is. Less than the failing
    call's output limit, or that call would have ended before the fault."""
    out: list[bytes] = []
    for at in range(len(data)):
        try:
            out.append(inflater.decompress(data[at:at + 1]))
        except zlib.error:
            return b"".join(out), at
    return b"".join(out), len(data)


class StreamError(OSError):
    """A segment stream that cannot go on; `kind` names the finding."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    def __str__(self) -> str:
        return str(self.args[0])


def _too_large(size: int | None) -> StreamError:
    holds = f"holds {size} bytes" if size is not None else "inflates to more bytes"
    return StreamError("segment_too_large",
                       f"the file {holds} than a Kafka segment can ({MAX_SEGMENT_BYTES}); "
                       f"the rest is not read")


class FileStream(io.RawIOBase):
    """A regular file read up to the size it had when opened, and at most a segment's."""

    def __init__(self, raw: io.RawIOBase, size: int) -> None:
        self.raw = raw
        self.size = size
        self.limit = min(size, MAX_SEGMENT_BYTES)
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET:
            raise io.UnsupportedOperation("segment streams seek from the start only")
        self.pos = self.raw.seek(min(offset, self.limit))
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: WriteableBuffer) -> int:
        left = self.limit - self.pos
        if left <= 0:
            if self.size > self.limit:
                raise _too_large(self.size)
            return 0
        view = memoryview(buffer).cast("B")
        got = self.raw.readinto(view[:min(len(view), left)]) or 0
        self.pos += got
        return got

    def close(self) -> None:
        self.raw.close()
        super().close()


class GzipStream(io.RawIOBase):
    """A `.log.gz` file inflated as it is read (members back to back, as gzip allows)."""

    def __init__(self, raw: io.RawIOBase) -> None:
        self.raw = raw
        self.members = 0  # members inflated to their end
        self.inflater = zlib.decompressobj(31)
        self.started = False  # the current member has begun
        self.pending = b""  # compressed bytes not given to the inflater yet
        self.read_in = 0  # compressed bytes read from the file
        self.produced = 0
        self.out = b""  # inflated bytes, delivered up to `taken`
        self.taken = 0
        self.error: StreamError | None = None
        self.done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        """Fill `buffer` as far as the stream goes; a fault is raised by the first read
        that has nothing left to give before it."""
        view = memoryview(buffer).cast("B")
        want = len(view)
        filled = 0
        while filled < want:
            if self.taken < len(self.out):
                n = min(want - filled, len(self.out) - self.taken)
                view[filled:filled + n] = memoryview(self.out)[self.taken:self.taken + n]
                self.taken += n
                filled += n
            elif self.error is not None:
                if filled:
                    break
                raise self.error
            elif self.done:
                break
            else:
                self._step(max(want - filled, _INPUT_CHUNK))
        return filled

    def _input(self) -> bytes:
        data = self.raw.read(_INPUT_CHUNK) or b""
        self.read_in += len(data)
        return data

    def _step(self, want: int) -> None:
        """Inflate up to `want` more bytes into `out` (all of it delivered before), or note
        the end or the fault."""
        if not self.pending:
            self.pending = self._input()
            if not self.pending:
                if self.started:
                    self.error = StreamError(
                        "read_error", f"the gzip stream is cut: its {self.read_in} compressed "
                        f"bytes end inside a member")
                self.done = True
                return
        if not self.started:
            while len(self.pending) < 2 and (more := self._input()):
                self.pending += more
            if not self.pending.startswith(_GZIP_MAGIC):
                trailing = len(self.pending) + self._drain()
                where = "the file is" if not self.members else \
                    f"{trailing} bytes after the gzip stream are"
                self.error = StreamError(
                    "read_error", f"{where} not gzip data (the file has {self.read_in} "
                    f"compressed bytes)")
                return
        room = MAX_SEGMENT_BYTES - self.produced
        before = self.inflater.copy()
        try:
            data = self.inflater.decompress(self.pending, min(want, room + 1))
        except zlib.error as exc:
            data, at = _salvage(before, self.pending)
            self.error = StreamError(
                "read_error", f"the gzip stream is corrupt at compressed byte "
                f"{self.read_in - len(self.pending) + at}: {exc}")
            self.out, self.taken = data, 0
            self.produced += len(data)
            return
        self.started = True
        self.taken = 0
        if len(data) > room:
            self.out = data[:room]
            self.error = _too_large(None)
            return
        self.produced += len(data)
        self.out = data
        self.pending = self.inflater.unconsumed_tail
        if self.inflater.eof:  # the next member, if any, starts with what is left
            self.pending = self.inflater.unused_data + self.pending
            self.inflater = zlib.decompressobj(31)
            self.started = False
            self.members += 1

    def _drain(self) -> int:
        count = 0
        while data := self._input():
            count += len(data)
        return count

    def close(self) -> None:
        self.raw.close()
        super().close()
