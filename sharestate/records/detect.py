"""Tell which topic and dialect a segment was written in, from its own records.

Kafka 4.0 and 4.1+ write share-state values with the same version number but different
layouts (and some `__consumer_offsets` values differ too), so a segment's dialect cannot be
read off a header. We decode a sample of its data records under every candidate
(topic, dialect) and keep the candidate under which the fewest records fail to decode,
counting records of an unknown type only as a tie-breaker (Kafka itself skips those as
left-overs, so they are weak evidence); remaining ties go to `__share_group_state`, then
to the newest dialect. When no sampled record decodes under any candidate (or there is no
record to sample) and the caller did not pin the topic, the topic is unknown (None): a
segment is never taken for one topic by default. The choice and its evidence are returned
so callers can report them: nothing is guessed silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sharestate.records.catalog import TOPICS, dialect, dialect_names
from sharestate.records.keyvalue import decode_key_value

SAMPLE_RECORDS = 256


@dataclass(frozen=True)
class Detection:
    """The chosen topic (None: no record tells it) and dialect, with the failure count of
    every candidate."""

    topic: str | None
    dialect: str
    sampled: int
    failures: dict[tuple[str, str], tuple[int, int]]
    forced: bool
    topic_detected: bool = False
    """Whether the topic, too, was chosen from the records (nothing named it)."""

    def describe(self) -> str:
        if self.forced:
            return f"{self.topic}, dialect {self.dialect} (as requested)"
        if self.topic is None:
            return (f"topic unknown: none of the {self.sampled} records sampled decodes as "
                    f"{' or '.join(TOPICS)} (--topic reads it as one)")
        scores = ", ".join(f"{d}: {bad} + {unknown} of unknown type"
                           for (t, d), (bad, unknown) in sorted(self.failures.items())
                           if t == self.topic)
        topic = ""
        if self.topic_detected:
            others = {t: min(sum(f) for (t2, _), f in self.failures.items() if t2 == t)
                      for t, _ in self.failures if t != self.topic}
            topic = "; topic detected from the records" + "".join(
                f" (as {t}, {n} would fail)" for t, n in sorted(others.items()))
        return (f"{self.topic}, dialect {self.dialect} (auto: {self.sampled} records sampled;"
                f" failures by dialect {scores}{topic})")


def detect(sample: Iterable[tuple[bytes | None, bytes | None]], *, topic: str | None,
           dialect_name: str | None) -> Detection:
    """Choose (topic, dialect) for a segment from a sample of its (key, value) pairs.

    `topic` and `dialect_name` pin the choice when given (None = detect).
    """
    records = list(sample)
    topics: Sequence[str] = (topic,) if topic else TOPICS
    dialects: Sequence[str] = (dialect_name,) if dialect_name else dialect_names()
    failures: dict[tuple[str, str], tuple[int, int]] = {}
    for candidate_topic in topics:
        for name in dialects:
            schemas = dialect(name)
            errors = [decoded.error.kind for key, value in records
                      if (decoded := decode_key_value(schemas, candidate_topic, key, value)).error]
            unknown = errors.count("unknown_record_type")
            failures[(candidate_topic, name)] = (len(errors) - unknown, unknown)
    newest_first = {name: rank for rank, name in enumerate(dialect_names())}
    best = min(failures, key=lambda c: (failures[c], TOPICS.index(c[0]), newest_first[c[1]]))
    readable = len(records) - sum(failures[best])
    return Detection(topic=best[0] if topic or readable else None, dialect=best[1],
                     sampled=len(records), failures=failures,
                     forced=bool(topic and dialect_name), topic_detected=not topic)
