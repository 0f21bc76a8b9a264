"""Silver rows: the bronze `log_records` of each topic decoded into typed columns.

`share_state_rows` turns bronze rows of `__share_group_state` into `share_state_records`,
`group_rows` those of `__consumer_offsets` into `group_records` (typed offset-commit columns,
and every record's key and value as JSON in Kafka's field names, snake_cased). Both decode
the raw bytes again with the dialect bronze recorded, in bulk per record batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import repeat
from operator import is_, is_not
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sharestate.coordinator.share_state import ABSENT_SLOTS, value_slots
from sharestate.log import RawRecord
from sharestate.records.catalog import dialect
from sharestate.records.keyvalue import KeyValue, decode_key_values
from sharestate.records.render import to_json
from sharestate.replay.rows import has_delivery_complete_count
from sharestate.tables.columns import columns_of, transpose
from sharestate.tables.spec import table

SHARE_STATE_SCHEMA = table("share_state_records").arrow_schema()

_BRONZE = ("partition", "segment", "offset", "timestamp", "key", "value", "is_control",
           "control_type", "producer_id", "is_transactional", "dialect", "decode_status")


def _bronze(rows: pa.RecordBatch) -> dict[str, list[Any]]:
    return {name: rows.column(name).to_pylist() for name in _BRONZE}


def _decode(columns: dict[str, list[Any]], topic: str) -> list[KeyValue | None]:
    """Each data row's KeyValue (None for control rows), decoded per dialect run."""
    n = len(columns["offset"])
    decoded: list[KeyValue | None] = [None] * n
    start = 0
    for i in range(1, n + 1):
        if i == n or columns["dialect"][i] != columns["dialect"][start]:
            index = [j for j in range(start, i) if not columns["is_control"][j]]
            records = [RawRecord(columns["offset"][j], columns["timestamp"][j], -1,
                                 columns["key"][j], columns["value"][j], ()) for j in index]
            schemas = dialect(columns["dialect"][start])
            for j, kv in zip(index, decode_key_values(schemas, topic, records), strict=True):
                decoded[j] = kv
            start = i
    return decoded


_VALUE_FIELDS = ("snapshot_epoch", "state_epoch", "leader_epoch", "start_offset",
                 "delivery_complete_count", "create_timestamp", "write_timestamp")


def share_state_rows(rows: pa.RecordBatch,
                     decoded: list[KeyValue | None] | None = None) -> pa.RecordBatch:
    """`share_state_records` rows for bronze rows of `__share_group_state` (columnar);
    `decoded`: each row's decoding, when the caller has it (else decoded here)."""
    if decoded is None:
        decoded = _decode(_bronze(rows), "__share_group_state")
    n = len(decoded)
    all_kinds, errors, keys = transpose(decoded, ((1,), (5,), (2,)))
    kindless = np.fromiter(map(is_, all_kinds, repeat(None)), bool, n)
    ok = decoded if (  # usually every row decoded cleanly
        not any(errors) and not kindless.any() and None not in keys) else _decoded_only(
        decoded, all_kinds, errors, keys)
    kinds, versions, values = transpose(ok, ((1,), (3,), (4,)))
    group, topic_id, partition = columns_of(ok, _KEY_COLUMNS)
    kind_of = (rows.column("dialect"), rows.column("record_type_id"))
    out: dict[str, Any] = _value_columns(
        _row_groups(*kind_of, rows.column("value_version"), keep=None if ok is decoded else
                    np.fromiter(map(is_not, ok, repeat(None)), bool, n)),
        kinds, versions, values, rows.column("dialect"))
    out.update({
        "state_topic": pa.repeat(pa.scalar("__share_group_state", pa.string()), n),
        "state_partition": rows.column("partition"), "segment": rows.column("segment"),
        "offset": rows.column("offset"), "timestamp": rows.column("timestamp"),
        "record_type": _names(all_kinds, _row_groups(*kind_of)),
        "is_control": rows.column("is_control").fill_null(False),
        "control_type": rows.column("control_type"), "producer_id": rows.column("producer_id"),
        "is_transactional": rows.column("is_transactional"), "group_id": group,
        "topic_id": topic_id, "partition": partition, "dialect": rows.column("dialect"),
        "decode_status": rows.column("decode_status")})
    return pa.RecordBatch.from_arrays([out[name] for name in SHARE_STATE_SCHEMA.names],
                                      schema=SHARE_STATE_SCHEMA)


_KEY_COLUMNS = tuple(((2, i), SHARE_STATE_SCHEMA.field(name).type)
                     for i, name in enumerate(("group_id", "topic_id", "partition")))
"""A KeyValue's share key fields (a ShareKey's, first in every share-state key)."""


def _decoded_only(decoded: list[KeyValue | None], kinds: list[Any], errors: list[Any],
                  keys: list[Any]) -> list[KeyValue | None]:
    """`decoded` with None for each row that did not decode (an error, no kind or no key;
    `kinds`, `errors`, `keys`: their fields), in bulk."""
    n = len(decoded)

    def flags(values: list[Any], test: Callable[[Any, None], bool]) -> np.ndarray:
        return np.fromiter(map(test, values, repeat(None)), bool, n)

    rows = np.fromiter(decoded, object, n)
    rows[flags(errors, is_not) | flags(kinds, is_) | flags(keys, is_)] = None
    return rows.tolist()  # type: ignore[no-any-return]


Groups = tuple[np.ndarray, list[int]]
"""Each row's group (numbered in order of first appearance) and each group's first row."""


def _row_groups(*columns: pa.Array, keep: np.ndarray | None = None) -> Groups:
    """The rows grouped by their values in `columns` (a null a value of its own), those not
    kept (`keep` false) in one group of their own: hashed column-wise, no Python step per
    row.

    A record's kind is its dialect's for its type id, so rows of one dialect and type id
    are rows of one kind (and with their value version, of one value layout)."""
    n = len(columns[0])
    key = np.zeros(n, np.int64)
    for column in columns:
        encoded = pc.dictionary_encode(column)
        key = key * (len(encoded.dictionary) + 1) + encoded.indices.fill_null(-1).to_numpy() + 1
    if keep is not None:
        key[~keep] = -1
    codes = pc.dictionary_encode(pa.array(key)).indices.to_numpy()
    firsts = np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)
    return codes, firsts.tolist()


def _names(kinds: list[Any], groups: Groups) -> pa.Array:
    """The name of each row's record kind (null for None), `groups` the rows of one kind."""
    codes, firsts = groups
    names = pa.array([None if kinds[first] is None else kinds[first].name for first in firsts],
                     pa.string())
    return names.take(pa.array(codes))


def _value_columns(layouts: Groups, kinds: list[Any], versions: list[Any], values: list[Any],
                   dialects: pa.Array) -> dict[str, pa.Array]:
    """The value fields (`_VALUE_FIELDS`, `state_batches`) of each row's decoded value, and
    whether it is a tombstone (a known kind without a value version); `layouts` the rows of
    one value layout (record kind and version).

    Where a field sits in a value depends on its layout, so the rows are ordered by layout,
    each layout's rows are transposed at once, and the columns are put back in row order:
    no Python loop per row."""
    codes, firsts = layouts
    order = np.argsort(codes, kind="stable")
    ordered = list(map(values.__getitem__, order.tolist())) if len(firsts) > 1 else values
    bounds = np.searchsorted(codes[order], np.arange(len(firsts) + 1))
    pieces: dict[str, list[pa.Array]] = {
        name: [] for name in (*_VALUE_FIELDS, "state_batches", "tombstone")}
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        part = ordered[start:end]
        first = int(order[start])
        kind, version = kinds[first], versions[first]
        layout = kind.value_layout(version) if kind is not None and version is not None \
            else None
        slots = value_slots(layout) if layout is not None else ABSENT_SLOTS
        dcc = has_delivery_complete_count(dialects[first].as_py())
        present = {name: ((slot,), SHARE_STATE_SCHEMA.field(name).type)
                   for name in (*_VALUE_FIELDS, "state_batches")
                   if (slot := getattr(slots, "batches" if name == "state_batches" else name))
                   >= 0 and (dcc or name != "delivery_complete_count")}
        picked = dict(zip(present, columns_of(part, list(present.values())), strict=True))
        for name in (*_VALUE_FIELDS, "state_batches"):
            pieces[name].append(picked[name] if name in picked
                                else pa.nulls(len(part), SHARE_STATE_SCHEMA.field(name).type))
        pieces["tombstone"].append(pa.repeat(pa.scalar(kind is not None and version is None),
                                             len(part)))
    columns = {name: pa.concat_arrays(chunks) for name, chunks in pieces.items()}
    if len(firsts) > 1:
        back = pa.array(np.argsort(order, kind="stable"))
        columns = {name: column.take(back) for name, column in columns.items()}
    return columns


_COMMIT_FIELDS = {"committed_offset": "offset", "leader_epoch": "leader_epoch",
                  "metadata": "metadata", "commit_timestamp": "commit_timestamp",
                  "expire_timestamp": "expire_timestamp", "commit_topic_id": "topic_id"}
_UNSET = {"leader_epoch": -1, "expire_timestamp": -1,
          "commit_topic_id": "AAAAAAAAAAAAAAAAAAAAAA"}


def group_rows(rows: pa.RecordBatch,
               decoded: list[KeyValue | None] | None = None) -> pa.RecordBatch:
    """`group_records` rows for bronze rows of `__consumer_offsets` (`decoded` as in
    `share_state_rows`)."""
    columns = _bronze(rows)
    out: dict[str, list[Any]] = {name: [] for name in table("group_records").names}
    if decoded is None:
        decoded = _decode(columns, "__consumer_offsets")
    for i, kv in enumerate(decoded):
        fields: dict[str, Any] = {}
        if kv is not None and kv.kind is not None and kv.key is not None:
            key = to_json(kv.kind.key_layout(), kv.key)
            fields = {"record_type": kv.kind.name, "record_type_id": kv.type_id,
                      "value_version": kv.value_version, "tombstone": kv.value is None,
                      "key_json": json.dumps(key, ensure_ascii=False),
                      "group_id": key.get("group_id", key.get("group"))}
            if "topic" in key and "partition" in key:
                fields.update(topic=key["topic"], partition=key["partition"])
            layout = kv.kind.value_layout(kv.value_version) if kv.value_version is not None \
                else None
            if kv.value is not None and layout is not None:
                value = to_json(layout, kv.value)
                fields["value_json"] = json.dumps(value, ensure_ascii=False)
                if kv.kind.name in ("OffsetCommit", "LegacyOffsetCommit"):
                    for target, source in _COMMIT_FIELDS.items():
                        raw = kv.value[layout.index(source)] if source in layout.names else None
                        fields[target] = None if raw == _UNSET.get(target) else raw
        elif kv is not None:
            fields = {"record_type_id": kv.type_id, "value_version": kv.value_version}
        row = {"offsets_topic": "__consumer_offsets",
               "offsets_partition": columns["partition"][i], "segment": columns["segment"][i],
               "offset": columns["offset"][i], "timestamp": columns["timestamp"][i],
               "tombstone": False, "is_control": bool(columns["is_control"][i]),
               "control_type": columns["control_type"][i],
               "producer_id": columns["producer_id"][i],
               "is_transactional": columns["is_transactional"][i],
               "dialect": columns["dialect"][i], "decode_status": columns["decode_status"][i],
               **fields}
        for name, column in out.items():
            column.append(row.get(name))
    return pa.RecordBatch.from_pydict(out, schema=table("group_records").arrow_schema())

