"""Partition numbers for the logs whose path names none, so that the commands and the tables
keep them apart.

The tables key a log by (topic, partition), and only a `<topic>-<partition>` folder names a
partition. A loose segment file, or a folder of Kafka-named segments elsewhere, is a log of
its own (`sharestate.replay.logs.loose_logs`), numbered below zero: a topic's
first such log is -1, each further one the next number down, in the order of their first
path. A number once given stays with its log (`known`: each segment file's partition as an
earlier run recorded it in a warehouse; none for the commands), so a log added later never
shifts the others, and one no longer given is not reused: bronze may still hold its rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sharestate.log import Segment


def loose_partitions(logs: Mapping[str, Sequence[Sequence[Segment]]],
                     known: Mapping[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    """(topic, partition) of each segment path of `logs` (topic -> its loose logs, as
    `loose_logs` gives them); `known`: path -> (topic, partition) from earlier runs."""
    numbers: dict[str, tuple[str, int]] = {}
    for topic, topic_logs in logs.items():
        used = {partition for t, partition in known.values() if t == topic and partition < 0}
        given: dict[int, int] = {}  # log index -> partition
        for index, log in enumerate(topic_logs):  # earlier numbers first, each to one log
            for segment in log:
                earlier = known.get(str(segment.path))
                if earlier and earlier[0] == topic and earlier[1] < 0 \
                        and earlier[1] not in given.values():
                    given[index] = earlier[1]
                    break
        for index in range(len(topic_logs)):
            if index not in given:
                taken = used | set(given.values())
                given[index] = next(p for p in range(-1, -2**31 - 1, -1) if p not in taken)
        for index, log in enumerate(topic_logs):
            numbers.update((str(segment.path), (topic, given[index])) for segment in log)
    return numbers
