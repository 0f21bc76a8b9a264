"""The `sharestate` command line.

Exit codes: 0 everything decoded/applied cleanly; 1 the run completed but recorded findings;
2 bad arguments or an unreadable source (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any, NoReturn

from sharestate.log import SourceError, discover
from sharestate.records.catalog import dialect_names
from sharestate.records.segment import decode_segment, detect_segment, record_json

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad argument or unreadable input: reported in one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


@contextmanager
def _output(path: str | None) -> Iterator[IO[str]]:
    if path is None or path == "-":
        yield sys.stdout
        return
    try:
        handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    with handle:
        yield handle


def _dialect_arg(value: str) -> str | None:
    if value == "auto":
        return None
    if value not in dialect_names():
        raise argparse.ArgumentTypeError(
            f"unknown dialect {value!r} (choose auto, {', '.join(dialect_names())})")
    return value


def _table_line(row: dict[str, Any]) -> str:
    error = row["error"]
    what = row["record_type"] or (row["control"] or {}).get("type") or "-"
    body = json.dumps(row["value"] if error is None else error, ensure_ascii=False)
    key = json.dumps(row["key"], ensure_ascii=False) if row["key"] else ""
    return f"{row['partition'] if row['partition'] is not None else '-':>4} " \
           f"{row['offset'] if row['offset'] is not None else '-':>12} {what:<36} {key} {body}"


def cmd_decode(args: argparse.Namespace) -> int:
    """Decode segments to JSON lines (or a table), one line per record in log order."""
    segments = discover(args.source)
    findings = 0
    with _output(args.output) as out:
        for segment in segments:
            detection = detect_segment(segment, dialect_name=args.dialect, topic=args.topic)
            print(f"{segment.path}: {detection.describe()}", file=sys.stderr)
            for record in decode_segment(segment, detection):
                row = record_json(record)
                findings += row["error"] is not None
                if args.format == "table":
                    out.write(_table_line(row) + "\n")
                else:
                    out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    if findings:
        print(f"{findings} findings", file=sys.stderr)
    return EXIT_FINDINGS if findings else EXIT_OK


def _add_sources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", nargs="+",
                        help="segment file (.log or .log.gz), partition directory or log.dirs root")
    parser.add_argument("--dialect", type=_dialect_arg, default=None,
                        help="record format: auto (detect per segment, default), "
                             + ", ".join(dialect_names()))
    parser.add_argument("--topic", choices=["__share_group_state", "__consumer_offsets"],
                        help="topic of segments whose path does not name it (default: detect)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sharestate",
                     description="Decode, replay and analyse Kafka's share-group state and "
                                 "consumer-offsets logs.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    decode = sub.add_parser("decode", help="decode segments to JSON lines")
    _add_sources(decode)
    decode.add_argument("--output", "-o", help="write here instead of stdout")
    decode.add_argument("--format", choices=["jsonl", "table"], default="jsonl")
    decode.set_defaults(func=cmd_decode)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except (UsageError, SourceError) as exc:
        print(f"sharestate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
