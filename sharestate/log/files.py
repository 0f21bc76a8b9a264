"""Files a user names (segments, argument files, checkpoints, outputs), opened so that
whatever the path turns out to be cannot stall or swamp the command.

Reading takes a regular file only, opened without waiting (a FIFO without a writer, a
device or a directory is refused at once, never blocked on), and no more of it than the
size it had when opened (a file that grows, or `/dev/zero` behind a link, gives no more).
Writing opens without waiting too: a FIFO that no process reads is refused.

Every refusal is an `OSError` whose `strerror` says why in a few words, for the caller's
one line (`cannot read PATH: not a regular file (a FIFO)`).
"""

from __future__ import annotations

import errno
import io
import os
import stat

Path = str | os.PathLike[str]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


class NotRegularFile(OSError):
    """The path names a FIFO, a device, a directory or a socket, not a regular file."""


class FileTooLarge(OSError):
    """A regular file larger than its reader takes."""


def open_regular(path: Path) -> tuple[io.FileIO, int]:
    """The regular file at `path` open for reading (blocking, as usual, once open) and the
    size it had when opened, which is as far as it should be read. `NotRegularFile` for
    anything else; OSError where it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a file")
            raise NotRegularFile(errno.EINVAL, f"not a regular file ({kind})")
        os.set_blocking(fd, True)
        return io.FileIO(fd, "rb"), info.st_size
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes the regular file at `path` held when opened (see `open_regular`);
    `FileTooLarge` when that is more than `limit` bytes."""
    file, size = open_regular(path)
    with file:
        if limit is not None and size > limit:
            most = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"
            raise FileTooLarge(errno.EFBIG, f"larger than the {most} it may hold "
                                            f"({size} bytes)")
        return file.read(size)


def holds_only_zeros(path: Path, chunk: int = 1 << 16) -> bool:
    """Whether the regular file at `path` holds no byte but zero (an empty file too): a
    segment Kafka preallocated (`log.preallocate`) and has not written yet."""
    file, size = open_regular(path)
    with file:
        while size > 0 and (data := file.read(min(chunk, size))):
            if data.count(0) != len(data):
                return False
            size -= len(data)
    return True


def open_output(path: Path) -> io.TextIOWrapper:
    """`path` created or truncated for writing UTF-8 text, opened without waiting: a FIFO
    no process reads is refused (`strerror` says so; opened as usual it waits for a reader
    for ever), one that a process reads (`-o /dev/stdout | ...`) is written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "a FIFO no process reads") from None
        raise
    os.set_blocking(fd, True)
    return open(fd, "w", encoding="utf-8")
