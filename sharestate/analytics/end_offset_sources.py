"""Where `topic_end_offsets` rows come from: a run's `--end-offsets-from` sources and its
`--end-offsets` file, asked for the sampled times (`end_offsets.sampled`).

A source is one of:
- `kafka://host:port[,host:port]`: a live cluster, ListOffsets by timestamp
  (`sharestate.cluster.kafka_times`);
- `http://host:port` (or https): a running `sharestate serve`, whose `/v1/end-offsets`
  lists the end offsets it read from its cluster and when;
- a folder: a log.dirs root holding the data topics' partition folders, or one such folder
  (`sharestate.log.end_offsets`).
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sharestate.analytics.end_offsets import FILE, KAFKA, SEGMENTS, SERVE, Where, end_offset_row
from sharestate.cluster import KafkaSourceError, parse_options
from sharestate.cluster.kafka_options import (
    KAFKA_SCHEME,
    KafkaOptionError,
    redact_userinfo,
    source_options,
)
from sharestate.cluster.kafka_plan import ClusterNotReady
from sharestate.cluster.kafka_times import offsets_at_times
from sharestate.log import SourceError
from sharestate.log.end_offsets import data_partitions, end_offsets_at

HTTP_SCHEMES = ("http://", "https://")
SERVE_PATH = "/v1/end-offsets"
SERVE_TIMEOUT_S = 30.0
NAMED = 5
"""The most topics `unanswered` names."""


class EndOffsetSourceError(ValueError):
    """A source that cannot be read: one line."""


class EndOffsetsUnavailable(EndOffsetSourceError):
    """A live source that did not answer (a cluster not ready or unreachable, a serve not
    answering or answering that it cannot now): it may answer later."""


def check_source(source: str) -> str:
    """`source` if it names a kind of source (see the module docstring), else the error."""
    if source.startswith(KAFKA_SCHEME) or source.startswith(HTTP_SCHEMES) \
            or Path(source).is_dir():
        return source
    raise EndOffsetSourceError(f"--end-offsets-from {source!r}: expected kafka://host:port, "
                               f"http://host:port of sharestate serve, or a log.dirs folder")


def observe(source: str, wanted: Mapping[Where, Sequence[int]], *,
            names: Mapping[str, str] | None = None,
            kafka_options: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """`topic_end_offsets` rows from `source` for the wanted times of each (topic id,
    partition); a serve source gives every end offset it read, wanted or not. `names` (topic
    id -> name) files a partition folder without `partition.metadata` under its id."""
    if source.startswith(KAFKA_SCHEME):
        try:
            options = parse_options(source_options(source, kafka_options or {}))
            found = offsets_at_times(options, wanted)
        except ClusterNotReady as exc:
            raise EndOffsetsUnavailable(str(exc)) from None
        except (KafkaSourceError, KafkaOptionError) as exc:
            raise EndOffsetSourceError(str(exc)) from None
        return [end_offset_row(f.topic, f.topic_id, f.partition, f.time, f.end_offset, KAFKA,
                               f.timestamp_type) for f in found]
    if source.startswith(HTTP_SCHEMES):
        return _from_serve(source)
    return _from_segments(source, wanted, {name: i for i, name in (names or {}).items()})


def unanswered(source: str, wanted: Mapping[Where, Sequence[int]],
               rows: Sequence[Mapping[str, Any]], names: Mapping[str, str]) -> list[str]:
    """A note naming the topics of `wanted` (by id) of which `rows`, what `source`
    answered, hold no end offset (none: it answered them all). Their share-partitions' lag
    stays a lower bound; the cause may be a topic deleted, one the folder does not hold, or
    one the cluster hides from the client (a principal without Describe on it)."""
    ids = {name: topic_id for topic_id, name in names.items()}
    answered = {row["topic_id"] for row in rows} | {ids.get(row["topic"]) for row in rows}
    missing = sorted(names.get(t, t) for t in {topic_id for topic_id, _ in wanted} - answered)
    if not missing:
        return []
    shown = ", ".join(missing[:NAMED]) + (f" and {len(missing) - NAMED} more"
                                          if len(missing) > NAMED else "")
    return [f"--end-offsets-from {redact_userinfo(source)}: no end offsets of {shown}: the lag "
            f"of their share-partitions is a lower bound (a topic deleted or not there, or one "
            f"the client may not see: a principal needs Describe on the topic)"]


def _from_segments(source: str, wanted: Mapping[Where, Sequence[int]],
                   ids: Mapping[str, str]) -> list[dict[str, Any]]:
    try:
        partitions = data_partitions([source])
    except SourceError as exc:
        raise EndOffsetSourceError(str(exc)) from None
    rows: list[dict[str, Any]] = []
    for partition in partitions:
        topic_id = partition.topic_id or ids.get(partition.topic)
        times = wanted.get((topic_id, partition.partition), ()) if topic_id else ()
        if not times:
            continue
        found = end_offsets_at(partition, times)
        rows.extend(end_offset_row(partition.topic, topic_id, partition.partition, time, end,
                                   SEGMENTS, found.timestamp_type)
                    for time, end in found.points)
    return rows


def _from_serve(source: str) -> list[dict[str, Any]]:
    url = source.rstrip("/") + SERVE_PATH
    try:
        with urllib.request.urlopen(url, timeout=SERVE_TIMEOUT_S) as answer:
            entries = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        kind = EndOffsetsUnavailable if exc.code >= 500 else EndOffsetSourceError
        raise kind(f"cannot read end offsets from {url}: {exc}") from None
    except (OSError, http.client.HTTPException) as exc:  # refused, timed out, cut off
        raise EndOffsetsUnavailable(f"cannot read end offsets from {url}: {exc}") from None
    except ValueError as exc:
        raise EndOffsetSourceError(f"cannot read end offsets from {url}: {exc}") from None
    try:
        return [end_offset_row(e.get("topic"), e.get("topic_id"), int(e["partition"]),
                               int(e["time"]), int(e["end_offset"]), SERVE, None)
                for e in entries]
    except (TypeError, KeyError, ValueError, AttributeError):
        raise EndOffsetSourceError(f"{url} did not answer a list of end offsets") from None


def file_rows(path: str, ends: Mapping[tuple[str, int], int],
              names: Mapping[str, str]) -> list[dict[str, Any]]:
    """The `--end-offsets` file's rows, at its modification time. A file names a topic by
    id or by name: a known topic id (`names`: id -> name) is filed as one, anything else
    as a name."""
    time = int(os.stat(path).st_mtime * 1000)
    rows = []
    for (topic, partition), end in sorted(ends.items()):
        name, topic_id = (names[topic], topic) if topic in names else (topic, None)
        rows.append(end_offset_row(name, topic_id, partition, time, end, FILE, None))
    return rows
