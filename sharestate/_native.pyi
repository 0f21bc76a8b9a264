"""Types of `sharestate._native` (csrc/): C twins of sharestate's hot pure-Python paths.

Each function gives exactly what its pure-Python twin gives (tests/test_native.py holds them
together); callers reach it through `sharestate.native`. Tuples passed in are read by
position: their NamedTuples' field orders are the constants of csrc/native.h, exported as
`FIELDS`. Records read in C are `Record`s, which behave as (and compare equal to) RawRecords,
so lists of records are typed `list[RawRecord]` here, as `Batch.records` is.
"""

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, final

from typing_extensions import Buffer, CapsuleType

from sharestate.analytics.audit import _Seen
from sharestate.cluster.consumed import ConsumedRun
from sharestate.coordinator.shard import NativeContext
from sharestate.coordinator.share_state import Batches, ShareKey, StateBatch
from sharestate.log.batch import Batch, BatchHeader, RawRecord
from sharestate.log.records_v2 import RecordError
from sharestate.records.codec import StructProgram
from sharestate.records.keyvalue import KeyValue, KindPrograms
from sharestate.records.segment import Decoded
from sharestate.replay.share_log import HistoryEntry, HistoryRows, SlotTable
from sharestate.tables.columns import Path

_Row = TypeVar("_Row", bound=tuple[Any, ...])

FIELDS: dict[str, tuple[str, ...]]
"""The field order C assumes for each tuple it reads or builds, by NamedTuple name."""
KINDS: tuple[str, ...]
"""The wire kinds of `compile`'s programs, by number (`sharestate.records.spec.Kind`)."""
SOURCES: str
"""SHA-256 (hex) of the csrc/ files this module was built from (`setup.sources_digest`):
part of the core's fingerprint (`sharestate.replay.snapshot.fingerprint`)."""

@final
class Record:
    """A v2 record read in C over its batch's bytes; twin: `sharestate.log.RawRecord`."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def sequence(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...]: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> Any: ...
    def _replace(self, **changes: Any) -> RawRecord: ...

def compile(program: StructProgram, /) -> CapsuleType:
    """A struct program compiled for `read_struct`; twin: none (the Python codec reads
    `StructLayout`s as they are)."""

def read_struct(layout: CapsuleType, data: Buffer, pos: int, end: int,
                /) -> tuple[tuple[Any, ...], int]:
    """One struct of `data[pos:end]`: (values, new position); twin:
    `sharestate.records.codec.read_struct_py`."""

def parse_records(buf: Buffer, pos: int, end: int, count: int, base_offset: int,
                  base_timestamp: int, base_sequence: int, last_delta: int,
                  /) -> tuple[list[RawRecord], RecordError | None]:
    """`count` v2 records of `buf[pos:end]`; twin: `sharestate.log.records_v2.parse_records_py`."""

def scan_v2(buf: Buffer, off: int, base_position: int, max_batch: int, max_records: int,
            crc: Callable[[memoryview], int], create_time: str, log_append_time: str,
            none: str, max_batches: int, stop: int, order_last: int | None,
            segment_first: int | None, span: int, /) -> tuple[list[Batch], int, int]:
    """The clean uncompressed v2 batches from `buf[off:]`, where the walk stopped, and how
    many of the first of them `sharestate.log.order.in_order` admits on its usual path
    after `order_last` (data batches, none past `span` offsets beyond `segment_first`);
    twin: the batch-by-batch walk of `sharestate.log.framing` (its clean-batch path)."""

def next_candidate(buf: Buffer, off: int, stop: int, eof: bool, max_batch: int, /) -> int:
    """The first position of `buf[off:stop]` passing the resync header checks, or -1 - the
    position where they stopped; twin: `sharestate.log.resync.next_candidate_py`."""

def crc_shift(crc: int, length: int, castagnoli: bool, /) -> int:
    """x^(8 * length) * crc modulo CRC-32C's polynomial (`castagnoli`) or CRC-32's; twin:
    `sharestate.log.checksums.crc_shift_py`."""

def decode_key_values(records: list[RawRecord], table: dict[int, KindPrograms],
                      fallback: Callable[[bytes | None, bytes | None], KeyValue],
                      /) -> list[KeyValue]:
    """Each record's decoded key and value; twin: `decode_key_value` of
    `sharestate.records.keyvalue` per record (`fallback` takes what C does not)."""

def combine(so_far: Sequence[StateBatch], new: Sequence[StateBatch], start_offset: int,
            /) -> Batches:
    """Kafka 4.4's combiner; twin: `sharestate.coordinator.combiner.combine_py`."""

def share_apply(context: NativeContext, records: list[RawRecord], decoded: list[Decoded],
                as_of_offset: int | None, as_of_time: int | None, slots: SlotTable,
                fallback: Callable[[RawRecord, Decoded], None],
                history: list[HistoryEntry] | HistoryRows | None,
                /) -> tuple[int, bool, int | None, int | None]:
    """Apply records to a shard until the stop point: (applied, stopped, last offset, last
    timestamp); twin: `_Applier.apply_all` of `sharestate.replay.share_log`."""

def share_audit(seen: dict[ShareKey, _Seen], seen_type: type[_Seen], key_type: type[ShareKey],
                records: list[RawRecord], decoded: list[Decoded], slots: SlotTable,
                fallback: Callable[[RawRecord, KeyValue], object], /) -> None:
    """Audit share-state records; twin: `sharestate.analytics.audit.ShareAuditor.observe`
    (reached through `fallback`, which takes the records C does not)."""

def tuples(row_type: type[_Row], n: int, columns: tuple[tuple[Any, ...], ...],
           /) -> list[_Row]:
    """Rows of a tuple type from Arrow buffers; twin:
    `sharestate.tables.columns.tuples_of_py`."""

def transpose(rows: list[Any], paths: tuple[Path, ...], /) -> list[list[Any]]:
    """One list per index path into the rows; twin: `sharestate.tables.columns.transpose_py`."""

@final
class Columns:
    """Arrow buffers of columns built from rows; twin: `sharestate.tables.columns.ColumnsPy`."""

    def __new__(cls, specs: tuple[tuple[Path, int], ...], /) -> Columns: ...
    def __len__(self) -> int: ...
    def append(self, row: Any, /) -> None:
        """Add one row (every column, or on an error none)."""
    def extend(self, rows: list[Any], /) -> None:
        """Add a list of rows."""
    def take(self) -> list[tuple[bytes | None, ...]]:
        """The buffers of every column (see csrc/columns.c), emptied."""

def arrow_records(n: int, buffer: bytes, offsets: Buffer, timestamps: Buffer,
                  key_offsets: Buffer, key_valid: Buffer | None, value_offsets: Buffer,
                  value_valid: Buffer | None, value_base: int, /) -> list[RawRecord]:
    """`Record`s over the buffers of Arrow bronze columns; twin: the `RawRecord` path of
    `sharestate.tables.arrow_log.records_of`."""

def consumed_runs(messages: list[Any], header: BatchHeader, timestamp_types: tuple[str, ...],
                  /) -> list[ConsumedRun]:
    """Consumed messages (confluent-kafka's `Message`s) as runs of one partition, each record
    with its own batch header, or error messages alone; twin:
    `sharestate.cluster.consumed.consumed_runs_py`."""

def lag_walk_new(lines: tuple[Buffer, ...], horizon: int | None, /) -> CapsuleType:
    """A lag-history walk over the end-offset timelines `lines` (flat int64 arrays, in the
    order of `sharestate.analytics.lag_walk._NativeWalk._lines`); twin:
    `sharestate.analytics.lag_history.walk_groups` (through `lag_walk.walk_batches_py`)."""

def lag_walk_begin(walk: CapsuleType, saved: tuple[int, list[tuple[Any, ...]]] | None,
                   /) -> None:
    """A group's walk starts, from nothing (None) or a walk `lag_walk_end` gave."""

def lag_walk_feed(walk: CapsuleType, topic: Buffer, partition: Buffer, state_partition: Buffer,
                  record_offset: Buffer, time: Buffer, deleted: Buffer, start_offset: Buffer,
                  start_valid: Buffer, complete: Buffer, complete_valid: Buffer,
                  state_end: Buffer, state_end_valid: Buffer, /) -> None:
    """The group's next history rows: int32 topic codes, uint8 flags, int64 the rest."""

def lag_walk_end(walk: CapsuleType, /) -> tuple[int, list[tuple[Any, ...]]] | None:
    """The group's walk ends: (time, members) before the horizon (or at its last moment),
    None when it reached no moment before it."""

def lag_walk_take(walk: CapsuleType, /) -> tuple[int, tuple[bytes, ...]]:
    """(rows, column buffers) of the lag rows made since the last take."""
