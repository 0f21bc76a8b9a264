"""Argument values checked at the edge: argparse types, and the files arguments name
(`--end-offsets`, the quality gate's `--config` and `--acknowledgements`): regular files
only, opened without waiting (a FIFO is refused, never waited on), read up to a size cap.

Each refusal is one line naming the value and the range it must lie in; the command line
and the Spark jobs turn it into exit 2 before any work starts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sharestate.log.files import read_regular

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

_INTEGER = re.compile(r"[+-]?\d+")


def integer(text: str, low: int, high: int, what: str = "value") -> int:
    """`text` as an integer in [low, high], else ValueError with one line."""
    if not _INTEGER.fullmatch(text.strip()):
        raise ValueError(f"{what} must be an integer, not {text!r}")
    number = int(text)
    if not low <= number <= high:
        raise ValueError(f"{what} must be between {low} and {high}, not {number}")
    return number


def bounded(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""
    def parse(text: str) -> int:
        try:
            return integer(text, low, high)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("value ")) from None

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


def seconds(text: str) -> float:
    """An argparse type: a duration in seconds, 0 or more (fractions allowed)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
    if not 0 <= value <= 86_400 * 365:
        raise argparse.ArgumentTypeError(f"must be between 0 and a year in seconds, not {text}")
    return value


def fraction(text: str) -> float:
    """An argparse type: a fraction in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, not {text}")
    return value


offset = bounded(0, INT64_MAX)
"""A log offset (int64, not negative)."""
count = bounded(1, INT32_MAX)
"""A positive count."""
records_per_snapshot = bounded(0, INT32_MAX)
"""`share.coordinator.snapshot.update.records.per.snapshot`: 0 makes every write a
snapshot, as Kafka allows."""
retention_minutes = bounded(1, INT32_MAX)
"""`offsets.retention.minutes` (Kafka: at least 1)."""


def key_values(items: Iterable[str], flag: str) -> dict[str, str]:
    """`KEY=VALUE` items (of `flag`) as a mapping; an item without `=` or a key is refused."""
    settings = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"{flag} takes KEY=VALUE, not {item!r}")
        settings[key.strip()] = value
    return settings


def dialect(value: str) -> str | None:
    """An argparse type: a dialect name, or `auto` (None: detect)."""
    from sharestate.records.catalog import dialect_names

    if value == "auto":
        return None
    if value not in dialect_names():
        raise argparse.ArgumentTypeError(
            f"unknown dialect {value!r} (choose auto, {', '.join(dialect_names())})")
    return value


def time(text: str) -> int:
    """An argparse type: ISO 8601 time or epoch milliseconds -> epoch ms (int64)."""
    from sharestate.replay.logs import parse_time

    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_SECRET_KEY = re.compile(r"pass(word)?|secret|token|credential|jaas|private|api[._-]?key"
                         r"|access[._-]?key|\.pem$", re.IGNORECASE)


def secret_warnings(settings: dict[str, str], flag: str) -> list[str]:
    """A warning per setting that holds a credential: a command line shows in `ps` (and
    PySpark hands `--conf` values to spark-submit's argv) and in shell history. Kafka's
    credentials have environment variables (`SHARESTATE_KAFKA_*`) that never leak."""
    from sharestate.cluster.kafka_options import SENSITIVE, env_name

    warnings = []
    for key, value in settings.items():
        if flag == "--kafka-option":
            if key.lower() not in SENSITIVE or not value:
                continue
            where = f"set {env_name(key.lower())} instead"
        elif value and _SECRET_KEY.search(key):
            where = "put it in a conf file only you can read ($SHARESTATE_SPARK_CONF)"
        else:
            continue
        warnings.append(f"sharestate: warning: {flag} {key}=... looks like a credential; "
                            f"command lines are visible to other users (ps) and kept in "
                            f"shell history: {where}")
    return warnings


MAX_FILE_BYTES = 64 << 20
"""The most an argument file may hold: an `--end-offsets` file of 64 MiB lists some 900,000
partitions."""


def read_file(path: str | Path) -> bytes:
    """An argument file's bytes (`files.read_regular`, up to `MAX_FILE_BYTES`); OSError with
    a `strerror` that says why not."""
    return read_regular(path, MAX_FILE_BYTES)


class EndOffsetsError(ValueError):
    """The `--end-offsets` file cannot be used: one line."""


def read_end_offsets(path: str) -> dict[tuple[str, int], int]:
    """The topic end offsets of a JSON file: a list of
    `{"topic": name-or-id, "partition": p, "end_offset": n}` with integer partition
    (0..2^31-1) and end offset (0..2^63-1); nothing is coerced (no `true`, `1.7`, `"5"`).
    Nesting deeper than Python's JSON reader takes (its recursion limit) is refused."""
    try:
        entries = json.loads(read_file(path).decode("utf-8"))
    except OSError as exc:
        raise EndOffsetsError(f"cannot read end offsets from {path}: {exc.strerror}") from None
    except RecursionError:
        raise EndOffsetsError(f"end offsets file {path} is not a list of objects: it nests "
                              "too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise EndOffsetsError(f"end offsets file {path} is not JSON: {exc}") from None
    if not isinstance(entries, list):
        raise EndOffsetsError(f"end offsets file {path} must hold a JSON list of "
                              '{"topic", "partition", "end_offset"} objects')
    offsets: dict[tuple[str, int], int] = {}
    for index, entry in enumerate(entries):
        where = f"end offsets file {path}, entry {index}"
        if not isinstance(entry, dict) or set(entry) != {"topic", "partition", "end_offset"}:
            raise EndOffsetsError(f"{where}: expected an object with exactly topic, partition "
                                  f"and end_offset, got {_short(entry)}")
        topic = entry["topic"]
        if not isinstance(topic, str) or not topic:
            raise EndOffsetsError(f"{where}: topic must be a non-empty string, "
                                  f"not {_short(topic)}")
        partition = _json_int(entry["partition"], 0, INT32_MAX, f"{where}: partition")
        end = _json_int(entry["end_offset"], 0, INT64_MAX, f"{where}: end_offset")
        if (topic, partition) in offsets:
            raise EndOffsetsError(f"{where}: {topic}-{partition} is listed twice")
        offsets[(topic, partition)] = end
    return offsets


def _json_int(value: Any, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EndOffsetsError(f"{what} must be an integer, not {_short(value)}")
    if not low <= value <= high:
        raise EndOffsetsError(f"{what} must be between {low} and {high}, not {value}")
    return value


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


BACKENDS = ("auto", "rs", "jvm")
"""The Delta backends a job may ask for (`sharestate.lake.select` chooses among them)."""
BACKEND_CONF = "spark.sharestate.lake.backend"
"""The Spark setting that fixes the backend."""
VERBOSE_CONF = "spark.sharestate.verbose"
"""The Spark setting that keeps Spark's own console output (`sharestate.spark.console`)."""


def add_spark_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of every Spark job: its settings, master, Delta backend, and how long
    it waits for the warehouse lease."""
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="Spark setting (repeatable)")
    p.add_argument("--master", help="Spark master (default: the session's, local[2] here)")
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="Delta backend (default: spark.sharestate.lake.backend, else auto)")
    p.add_argument("--lease-wait", type=seconds, default=0.0, metavar="SECONDS",
                   help="wait this long for the warehouse lease another writer holds "
                        "(default: fail at once, exit 2)")
    add_verbose_argument(p)


def add_verbose_argument(p: argparse.ArgumentParser, also: str = "") -> None:
    """`--verbose`: Spark's own console output (banner, log lines, progress bars) too."""
    p.add_argument("--verbose", action="store_true",
                   help=f"show Spark's own console output (its banner, log lines and stage "
                        f"progress bars){also}; sets {VERBOSE_CONF}")


def spark_settings(args: argparse.Namespace) -> dict[str, str]:
    """`--conf` as settings with `--backend` folded in (ValueError: a malformed one); a
    warning on stderr for each that holds a credential."""
    settings = key_values(args.conf, "--conf")
    for warning in secret_warnings(settings, "--conf"):
        print(warning, file=sys.stderr)
    if args.backend:
        settings[BACKEND_CONF] = args.backend
    if getattr(args, "verbose", False):
        settings[VERBOSE_CONF] = "true"
    return settings
