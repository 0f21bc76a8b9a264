"""The warehouse lease: one writer at a time per warehouse.

Every writer — a pipeline run (all its jobs), one job run alone (`pipelines/<job>.py`, the
Airflow DAG's tasks), the quality gate, `sharestate sql --write` — holds the lease for as long
as it writes. Two runs started together would otherwise both see an empty warehouse, both
ingest every segment, and both commit: Delta's optimistic concurrency does not stop two
blind appends, and a run spans many tables, which no per-table commit check can keep
consistent with each other.

The lease is an exclusive lock (`flock`) on `<warehouse>/_lease`, taken without blocking and
retried until `wait` seconds have passed. The operating system releases it when its holder
ends, however it ends (kill -9 included), so a dead run never blocks the next one: there is
no stale lease to take over. While held, the file names the holder (run id, what it runs,
host, pid, since when) for the message a waiting writer prints. Readers (`sql`, `report`)
take no lease: Delta gives them the last committed version of each table.

Local and network (NFS) file systems: NFS locks are the server's, released when a dead
client's own lease expires.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LEASE_FILE = "_lease"
POLL_SECONDS = 0.5
NAMED_WITHIN = 2.0
"""Seconds a waiting writer gives the holder to name itself: it locks the file, then writes
its record, and a writer that looked in between would print `another writer`."""


class LeaseError(Exception):
    """The warehouse lease cannot be taken (one line): another writer holds it (who, since
    when), or the warehouse cannot hold the lease file (read-only, full, not writable by
    this user, no file locks)."""


def holder(warehouse: str | Path) -> dict[str, object] | None:
    """What the lease file says of its holder (None: nobody has written it yet)."""
    try:
        text = (Path(warehouse) / LEASE_FILE).read_text(encoding="utf-8")
        found = json.loads(text)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _describe(warehouse: Path) -> str:
    who = holder(warehouse)
    if who is None:
        return f"warehouse {warehouse} is in use by another writer"
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(str(who.get("since", 0)))))
    return (f"warehouse {warehouse} is in use by {who.get('what', 'a writer')} (run "
            f"{who.get('run')}, pid {who.get('pid')} on {who.get('host')}, since {since})")


@contextmanager
def warehouse_lease(warehouse: str | Path, *, run: str, what: str,
                    wait: float = 0.0) -> Iterator[None]:
    """Hold the warehouse's lease while the block runs; wait up to `wait` seconds for it,
    then raise LeaseError. `what` says what the holder does (e.g. `sharestate run`)."""
    root = Path(warehouse)
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / LEASE_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _unwritable(root, exc) from None
    try:
        _acquire(fd, root, wait)
        record = {"run": run, "what": what, "host": socket.gethostname(), "pid": os.getpid(),
                  "since": time.time()}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
        except OSError as exc:
            raise _unwritable(root, exc) from None
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # the next holder's record, not a stale one, is read
    finally:
        os.close(fd)  # releases the lock


def _unwritable(root: Path, exc: OSError) -> LeaseError:
    return LeaseError(f"cannot take the warehouse lease {root / LEASE_FILE}: {exc.strerror} "
                      "(a writer needs the warehouse writable)")


def _acquire(fd: int, root: Path, wait: float) -> None:
    started = time.monotonic()
    deadline = started + max(wait, 0.0)
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError as exc:
            raise LeaseError(f"cannot lock {root / LEASE_FILE}: {exc.strerror} (the "
                             f"warehouse needs a file system with file locks)") from None
        if time.monotonic() >= deadline:
            hint = (f"; waited {wait:g} s" if wait > 0 else
                    "; wait for it or pass --lease-wait SECONDS")
            raise LeaseError(_describe(root) + hint)
        if not told and (holder(root) is not None
                         or time.monotonic() >= started + NAMED_WITHIN):
            print(f"sharestate: {_describe(root)}; waiting up to {wait:g} s for it",
                  file=sys.stderr, flush=True)
            told = True
        time.sleep(POLL_SECONDS if told else 0.05)  # soon again while it names itself
