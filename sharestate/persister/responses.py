"""What a persister call answers: an error code and message, data, and the records written."""

from __future__ import annotations

from typing import Generic, NamedTuple, TypeVar

from sharestate.coordinator.share_state import Batches
from sharestate.persister.record_codec import EmittedRecord

T = TypeVar("T")


class ReadData(NamedTuple):
    """The body of a successful ReadShareGroupState answer."""

    state_epoch: int
    start_offset: int
    batches: Batches


class Summary(NamedTuple):
    """The body of a ReadShareGroupStateSummary answer."""

    start_offset: int
    leader_epoch: int
    state_epoch: int
    delivery_complete_count: int


class Result(NamedTuple, Generic[T]):
    """One call's answer: `error_code` 0 and `data` (if the call returns any) on success,
    else Kafka's error code and message; `records` are those written, in log order."""

    error_code: int
    error_message: str | None
    data: T | None
    records: tuple[EmittedRecord, ...]

    @property
    def ok(self) -> bool:
        return self.error_code == 0
