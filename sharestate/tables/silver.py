"""Silver rows: the bronze `log_records` of each topic decoded into typed columns.

`share_state_rows` turns bronze rows of `__share_group_state` into `share_state_records`,
`group_rows` those of `__consumer_offsets` into `group_records` (typed offset-commit columns,
and every record's key and value as JSON in Kafka's field names, snake_cased). Both decode
the raw bytes again with the dialect bronze recorded, in bulk per record batch.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from sharestate.coordinator.share_state import share_key, share_value
from sharestate.log import RawRecord
from sharestate.records.catalog import dialect
from sharestate.records.keyvalue import KeyValue, decode_key_values
from sharestate.records.render import to_json
from sharestate.replay.views import has_delivery_complete_count
from sharestate.tables.spec import table

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


def share_state_rows(rows: pa.RecordBatch) -> pa.RecordBatch:
    """`share_state_records` rows for bronze rows of `__share_group_state`."""
    columns = _bronze(rows)
    out: dict[str, list[Any]] = {name: [] for name in table("share_state_records").names}
    for i, kv in enumerate(_decode(columns, "__share_group_state")):
        fields: dict[str, Any] = {}
        tombstone = False
        if kv is not None and kv.error is None and kv.kind is not None and kv.key is not None:
            key = share_key(kv.key, kv.kind.key_layout())
            fields = {"group_id": key.group_id, "topic_id": key.topic_id,
                      "partition": key.partition}
            tombstone = kv.value is None
            layout = kv.kind.value_layout(kv.value_version) if kv.value_version is not None \
                else None
            if kv.value is not None and layout is not None:
                value = share_value(kv.value, layout)
                fields.update(
                    snapshot_epoch=value.snapshot_epoch, state_epoch=value.state_epoch,
                    leader_epoch=value.leader_epoch, start_offset=value.start_offset,
                    delivery_complete_count=(value.delivery_complete_count
                                             if has_delivery_complete_count(
                                                 columns["dialect"][i]) else None),
                    create_timestamp=value.create_timestamp,
                    write_timestamp=value.write_timestamp,
                    state_batches=[{"first_offset": b[0], "last_offset": b[1],
                                    "delivery_state": b[2], "delivery_count": b[3]}
                                   for b in value.batches])
        row = {"state_topic": "__share_group_state", "state_partition": columns["partition"][i],
               "segment": columns["segment"][i], "offset": columns["offset"][i],
               "timestamp": columns["timestamp"][i],
               "record_type": kv.record_type if kv is not None else None,
               "tombstone": tombstone, "is_control": bool(columns["is_control"][i]),
               "control_type": columns["control_type"][i],
               "producer_id": columns["producer_id"][i],
               "is_transactional": columns["is_transactional"][i],
               "dialect": columns["dialect"][i], "decode_status": columns["decode_status"][i],
               **fields}
        for name, column in out.items():
            column.append(row.get(name))
    return pa.RecordBatch.from_pydict(out, schema=table("share_state_records").arrow_schema())


_COMMIT_FIELDS = {"committed_offset": "offset", "leader_epoch": "leader_epoch",
                  "metadata": "metadata", "commit_timestamp": "commit_timestamp",
                  "expire_timestamp": "expire_timestamp", "commit_topic_id": "topic_id"}
_UNSET = {"leader_epoch": -1, "expire_timestamp": -1,
          "commit_topic_id": "AAAAAAAAAAAAAAAAAAAAAA"}


def group_rows(rows: pa.RecordBatch) -> pa.RecordBatch:
    """`group_records` rows for bronze rows of `__consumer_offsets`."""
    columns = _bronze(rows)
    out: dict[str, list[Any]] = {name: [] for name in table("group_records").names}
    for i, kv in enumerate(_decode(columns, "__consumer_offsets")):
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

