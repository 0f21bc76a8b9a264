"""Decode throughput on Kafka's 250,000-record share-state segment, beside peer parsers.

(a) framing + CRC: every batch read and CRC-checked, every record walked — sharestate's
    reader next to aiokafka's C record parser and kafka-python's pure-Python one, on the same
    bytes in the same process; (b) full decode: framing plus every key and value decoded.
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import io
import json
import sys

from common import best_rate, large_segment

from sharestate import native
from sharestate.log import Batch, read_batches
from sharestate.records import catalog
from sharestate.records.keyvalue import decode_key_values


def sharestate_framing(data: bytes) -> int:
    count = 0
    for item in read_batches(io.BytesIO(data)):
        assert isinstance(item, Batch) and item.header.crc_valid
        for _record in item.records:
            count += 1
    return count


def sharestate_decode(data: bytes) -> int:
    schemas = catalog.dialect("4.1")
    count = 0
    for item in read_batches(io.BytesIO(data)):
        assert isinstance(item, Batch)
        for decoded in decode_key_values(schemas, catalog.SHARE_STATE_TOPIC, item.records):
            assert decoded.error is None
            count += 1
    return count


def memory_records_walk(memory_records: type, data: bytes) -> int:
    count = 0
    records = memory_records(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        for _record in batch:
            count += 1
    return count


def main() -> None:
    data = large_segment()
    from aiokafka.record._crecords import MemoryRecords as AiokafkaRecords
    from kafka.record.memory_records import MemoryRecords as KafkaPythonRecords

    # Alternate the contenders so that neither pays the process's warm-up alone.
    ours = peer = decode = 0.0
    for _ in range(4):
        ours = max(ours, best_rate(lambda: sharestate_framing(data), runs=3))
        peer = max(peer, best_rate(lambda: memory_records_walk(AiokafkaRecords, data), runs=3))
        decode = max(decode, best_rate(lambda: sharestate_decode(data), runs=3))
    figures: dict[str, float | int | bool] = {
        "records": sharestate_framing(data),
        "bytes": len(data),
        "native": native.enabled(),
        "framing_records_per_s": round(ours),
        "peer_records_per_s": round(peer),
        "kafka_python_records_per_s": round(
            best_rate(lambda: memory_records_walk(KafkaPythonRecords, data), runs=2)),
        "decode_records_per_s": round(decode),
    }
    figures["framing_vs_aiokafka"] = round(
        figures["framing_records_per_s"] / figures["peer_records_per_s"], 2)
    for name, value in figures.items():
        print(f"{name:>28}: {value}", file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
