"""The share coordinator's write path, offline: requests in, `__share_group_state` records out.

- `Persister` (`persister.py`): Kafka's `ShareCoordinatorShard` writer over one state
  partition, with `MetadataImage` (`metadata.py`), `PersisterConfig` and per-dialect
  `WriterRules` (`writer_rules.py`); answers are `Result`s (`responses.py`) carrying the
  `EmittedRecord`s (`record_codec.py`), which `ShareRecordCodec` turns into bytes.
- `apply_request` (`kafka_requests.py`): persister calls from Kafka's request JSON.
- `PartitionLog` / `LogDirs` (`log_writer.py`): records to batches and segment files;
  `ShareStateTopic` (`state_topic.py`): a persister per `__share_group_state` partition,
  chosen with Kafka's hashing, writing its segments.
- `java_hash.py` / `hash_order.py`: Java hash codes, partition choice and Java hash-table
  iteration orders, as Kafka's output depends on them.
"""

from sharestate.persister.kafka_requests import apply_request
from sharestate.persister.log_writer import LogDirs, PartitionLog
from sharestate.persister.metadata import MetadataImage
from sharestate.persister.persister import Persister, PersisterConfig
from sharestate.persister.record_codec import EmittedRecord, ShareRecordCodec
from sharestate.persister.responses import ReadData, Result, Summary
from sharestate.persister.state_topic import ShareStateTopic
from sharestate.persister.state_view import KeyState, shard_states
from sharestate.persister.writer_rules import WriterRules, writer_rules_for

__all__ = [
    "EmittedRecord",
    "KeyState",
    "LogDirs",
    "MetadataImage",
    "PartitionLog",
    "Persister",
    "PersisterConfig",
    "ReadData",
    "Result",
    "ShareRecordCodec",
    "ShareStateTopic",
    "Summary",
    "WriterRules",
    "apply_request",
    "shard_states",
    "writer_rules_for",
]
