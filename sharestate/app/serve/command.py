"""The `serve` subcommand's arguments and its run (until SIGTERM or SIGINT)."""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharestate import __version__, arguments, exit_codes
from sharestate.cluster.kafka_options import KAFKA_SCHEME, redact_userinfo
from sharestate.coordinator.expiry import DEFAULT_RETENTION_MINUTES
from sharestate.coordinator.shard import KAFKA, SEMANTICS
from sharestate.coordinator.share_rules import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
from sharestate.locations import location
from sharestate.log import DEFAULT_MAX_FINDINGS

if TYPE_CHECKING:
    from sharestate.app.serve.service import Service

DEFAULT_LISTEN = "127.0.0.1:8080"
CHECKPOINT_RECORDS = 1_000_000
CHECKPOINT_SECONDS = 60.0
SUPERVISE_S = 0.5
"""How often the command checks that the replays and the cluster reader still run."""
GC_YOUNG = 50_000


def listen_address(text: str) -> tuple[str, int]:
    """An argparse type: HOST:PORT (port 0: any free port)."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT, not {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def kafka_source(text: str) -> str:
    """An argparse type: kafka://HOST:PORT[,HOST:PORT...] -> the bootstrap servers."""
    servers = text.removeprefix(KAFKA_SCHEME)
    if not text.startswith(KAFKA_SCHEME) or not servers:
        raise argparse.ArgumentTypeError(f"must be kafka://HOST:PORT[,...], not "
                                         f"{redact_userinfo(text)!r}")
    return servers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", type=kafka_source, required=True, metavar="kafka://HOST:PORT",
                        help="the cluster (credentials from SHARESTATE_KAFKA_* variables)")
    parser.add_argument("--listen", type=listen_address, default=DEFAULT_LISTEN,
                        metavar="HOST:PORT", help="HTTP address (default %(default)s)")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a librdkafka client property, e.g. security.protocol=SASL_SSL")
    parser.add_argument("--connect-timeout", type=arguments.seconds, default=10.0,
                        metavar="SECONDS",
                        help="how long each try to reach the cluster waits for an answer (it "
                             "is tried again until it answers)")
    parser.add_argument("--dialect", type=arguments.dialect, default=None,
                        help="record schemas (default: detected per partition)")
    parser.add_argument("--semantics", choices=SEMANTICS, default=KAFKA,
                        help="kafka (markers ignored, as Kafka does) or transactional-acks")
    parser.add_argument("--snapshot-update-records", type=arguments.records_per_snapshot,
                        default=DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
                        help="share.coordinator.snapshot.update.records.per.snapshot")
    parser.add_argument("--retention-minutes", type=arguments.retention_minutes,
                        default=DEFAULT_RETENTION_MINUTES,
                        help="offsets.retention.minutes for the expiry forecast")
    parser.add_argument("--max-findings", type=arguments.count, default=DEFAULT_MAX_FINDINGS,
                        metavar="N", help="list at most this many findings of a partition one "
                                          "by one; count the rest, with one omitted_findings "
                                          "finding per kind (default %(default)s)")
    parser.add_argument("--checkpoint-dir", type=location, metavar="DIR",
                        help="write checkpoints here and resume from the last one at start "
                             "(default: none, every start replays from the log start)")
    parser.add_argument("--checkpoint-records", type=arguments.count, metavar="N",
                        help=f"checkpoint after N records applied (default "
                             f"{CHECKPOINT_RECORDS})")
    parser.add_argument("--checkpoint-seconds", type=arguments.seconds, metavar="SECONDS",
                        help=f"checkpoint after this long when anything was read (default "
                             f"{CHECKPOINT_SECONDS:g})")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT (exit 0, a last checkpoint written). A cluster that
    cannot answer yet (no broker up, partitions without a leader, a coordinator loading) is
    waited for, with a line each time it is tried. Exit 2 when the address cannot be
    listened on, the cluster refuses to be read (a bad setting, not an error that passes)
    or the checkpoint directory cannot be used (another service holds it, or its checkpoint
    was written for another cluster or other replay settings); exit 5 when a partition's
    replay or the cluster reader fails (one line on stderr says which and why; no checkpoint
    of the failed state is written, so a restart resumes from the last good one)."""
    from sharestate.app.serve.checkpoint import CheckpointRefused
    from sharestate.app.serve.http import ListenError
    from sharestate.app.serve.partition import ReplayOptions
    from sharestate.app.serve.service import CheckpointOptions, Stopped, start
    from sharestate.cluster import KafkaOptionError, KafkaSourceError, parse_options

    for flag, value in (("--checkpoint-records", args.checkpoint_records),
                        ("--checkpoint-seconds", args.checkpoint_seconds)):
        if value is not None and args.checkpoint_dir is None:
            print(f"sharestate: error: {flag} needs --checkpoint-dir", file=sys.stderr)
            return exit_codes.USAGE
    try:
        extra = arguments.key_values(args.kafka_option, "--kafka-option")
        options = parse_options({"bootstrap.servers": args.source,
                                 **{f"kafka.{k}": v for k, v in extra.items()}})
    except (ValueError, KafkaOptionError) as exc:
        print(f"sharestate: error: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    for warning in arguments.secret_warnings(extra, "--kafka-option"):
        print(warning, file=sys.stderr)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    collect_less()
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)  # also while it waits for the cluster
    signal.signal(signal.SIGINT, on_signal)
    try:
        service = start(options, args.listen,
                        ReplayOptions(args.dialect, args.semantics,
                                      args.snapshot_update_records, args.max_findings),
                        retention_minutes=args.retention_minutes, version=__version__,
                        checkpoints=None if args.checkpoint_dir is None else CheckpointOptions(
                            Path(args.checkpoint_dir),
                            args.checkpoint_records or CHECKPOINT_RECORDS,
                            CHECKPOINT_SECONDS if args.checkpoint_seconds is None
                            else args.checkpoint_seconds),
                        connect_timeout=args.connect_timeout, stop=stop)
    except Stopped:
        return exit_codes.OK
    except (ListenError, KafkaSourceError, CheckpointRefused, OSError) as exc:
        print(f"sharestate: error: {options.redact(str(exc))}", file=sys.stderr)
        return exit_codes.USAGE
    host, port = service.address
    print(f"sharestate serve: listening on http://{host}:{port}", file=sys.stderr, flush=True)
    return supervise(service, stop)


def collect_less() -> None:
    """Set the garbage collector for a process that makes millions of short-lived tuples:
    what was loaded so far is never collected (it lives as long as the process), and the
    young generation is collected every `GC_YOUNG` allocations instead of 700. Almost every
    object the writer makes is freed by its reference count before then; with the default,
    each chunk of consumed records, alive while it applies, was promoted and then walked by
    full collections over the whole heap (2.8 of 6.7 CPU seconds per million records)."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


def supervise(service: Service, stop: threading.Event) -> int:
    """Watch `service` until `stop` is set (close it, a last checkpoint written: exit 0) or
    a partition's replay or the cluster reader fails: then one line on stderr saying which
    and why, the service closed without a checkpoint (the failed state may hold part of a
    chunk; a restart resumes from the last good checkpoint), exit `SERVE_FAILED`, so a
    supervisor (systemd's Restart=on-failure, Kubernetes) restarts it."""
    while not stop.wait(SUPERVISE_S):
        failure = service.failure()
        if failure is not None:
            print(f"sharestate serve: stopping: {failure}; no checkpoint written "
                  f"(a restart resumes from the last one)", file=sys.stderr, flush=True)
            service.close(checkpoint=False)
            return exit_codes.SERVE_FAILED
    service.close()
    return exit_codes.OK
