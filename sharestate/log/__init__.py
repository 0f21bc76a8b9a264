"""Kafka log segments: batches and raw records in, batches and segment files out.

Reading (`read_segment`, over `read_batches`) streams a segment of RecordBatch v2 or legacy
magic 0/1 entries, checks CRCs, decompresses within limits, and turns anything unreadable
into a `LogFinding` instead of an exception. `parse_control` interprets control records;
`discover` finds segment files; `build_batch`/`SegmentWriter` write batches and segments.
"""

from sharestate.log.batch import (
    COMPRESSION_NAMES,
    CREATE_TIME,
    DEFAULT_RAW_CAP,
    LOG_APPEND_TIME,
    NO_TIMESTAMP_TYPE,
    Batch,
    BatchHeader,
    BatchRun,
    LogFinding,
    RawRecord,
    headers_of,
    record_counts,
)
from sharestate.log.builder import (
    DEFAULT_SEGMENT_BYTES,
    SegmentWriter,
    build_batch,
    build_control_batch,
    encode_record,
)
from sharestate.log.compression import (
    DEFAULT_MAX_INFLATED_BYTES,
    DecompressionError,
    compress,
    decompress,
)
from sharestate.log.control import (
    CONTROL_TYPES,
    ControlRecord,
    control_key,
    end_txn_marker_value,
    parse_control,
)
from sharestate.log.discovery import (
    INTERNAL_TOPICS,
    Segment,
    SourceError,
    SourceUnavailable,
    discover,
    read_segment,
    segment_of,
)
from sharestate.log.framing import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_RECORDS,
    DEFAULT_MAX_FINDINGS,
    ReadLimits,
    read_batches,
)
from sharestate.log.records_v2 import RecordError, parse_records
from sharestate.log.streams import MAX_SEGMENT_BYTES

__all__ = [
    "COMPRESSION_NAMES",
    "CONTROL_TYPES",
    "CREATE_TIME",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_BATCH_RECORDS",
    "DEFAULT_MAX_FINDINGS",
    "DEFAULT_MAX_INFLATED_BYTES",
    "DEFAULT_RAW_CAP",
    "DEFAULT_SEGMENT_BYTES",
    "INTERNAL_TOPICS",
    "LOG_APPEND_TIME",
    "MAX_SEGMENT_BYTES",
    "NO_TIMESTAMP_TYPE",
    "Batch",
    "BatchHeader",
    "BatchRun",
    "ControlRecord",
    "DecompressionError",
    "LogFinding",
    "RawRecord",
    "ReadLimits",
    "RecordError",
    "Segment",
    "SegmentWriter",
    "SourceError",
    "SourceUnavailable",
    "build_batch",
    "build_control_batch",
    "compress",
    "control_key",
    "decompress",
    "discover",
    "encode_record",
    "end_txn_marker_value",
    "headers_of",
    "parse_control",
    "parse_records",
    "read_batches",
    "read_segment",
    "record_counts",
    "segment_of",
]
