"""The configuration reference, `docs/configuration.md`, rendered from the code that reads
each setting — argument parsers, Spark defaults, environment variable names, quality
defaults — so the page cannot drift from the program:

    python -m sharestate.app.reference > docs/configuration.md

A test renders it again and compares it with the committed page.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Callable, Iterator
from dataclasses import fields

HELP_WIDTH = "96"


def _help(parse: Callable[[list[str]], object], argv: list[str]) -> str:
    """What `parse(argv + ["--help"])` prints, at a fixed width."""
    out = io.StringIO()
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            parse([*argv, "--help"])
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return out.getvalue().rstrip()


def _block(text: str) -> str:
    return f"```text\n{text}\n```\n\n"


def _commands() -> Iterator[str]:
    from sharestate.app.cli import build_parser

    parser = build_parser()
    choices: list[str] = []
    for action in parser._actions:  # argparse has no public accessor for subcommands
        if isinstance(action, argparse._SubParsersAction):
            choices = list(action.choices)
    yield "## Command line: `sharestate`\n"
    yield _block(_help(parser.parse_args, []))
    for name in choices:
        yield f"### `sharestate {name}`\n"
        yield _block(_help(parser.parse_args, [name]))


def _jobs() -> Iterator[str]:
    from sharestate.spark import quality_job
    from sharestate.spark.run import JOBS, parser

    yield "## Spark jobs\n"
    yield (f"`spark-submit pipelines/run_all.py` runs {', '.join(JOBS)} in order; "
           f"`pipelines/<job>.py` runs one, with the same arguments (a job ignores the ones "
           f"it does not use).\n\n")
    yield _block(_help(parser("run_all").parse_args, []))
    yield "### `pipelines/quality.py`\n"
    yield _block(_help(quality_job.main, []))


def _spark() -> Iterator[str]:
    from sharestate.analytics.lag_bins import BIN_ROWS, BINS_PER_CORE, MOST_BINS
    from sharestate.arguments import VERBOSE_CONF
    from sharestate.lake.select import BACKEND_CONF
    from sharestate.spark.class_archive import SETTING
    from sharestate.spark.console import QUIET
    from sharestate.spark.session import (
        CONF_FILE_ENV,
        DEFAULT_CONF_FILE,
        DEFAULTS,
        JIT_SETTING,
        LAG_BIN_SETTING,
        LEAN_HEAP,
        LOCAL_DEFAULTS,
        QUICK_JIT,
    )

    yield "## Spark settings\n"
    yield (f"Built-in defaults, overridden by the conf file "
           f"(`{DEFAULT_CONF_FILE.relative_to(DEFAULT_CONF_FILE.parents[1])}`, or the file "
           f"named by `${CONF_FILE_ENV}`), then by `spark-submit --conf`, then by the job's "
           f"own `--conf`. `{BACKEND_CONF}` picks the Delta backend: `auto` (default), `rs` "
           f"or `jvm`. `{SETTING} off` starts a JVM the job launches itself without the "
           f"class archive `make install` makes (default `auto`: with it when it exists; "
           f"see `sharestate/spark/class_archive.py`). `{JIT_SETTING}` is the JIT of that JVM: "
           f"`quick` (`{QUICK_JIT}`) or `full`; by default quick on a `local[...]` master "
           f"for the pipeline jobs (the JVM only plans, reads and commits there while Python "
           f"workers do the work) and for `sharestate sql` (its queries run in the JVM, but "
           f"are short: the optimising compiler's work costs more than it saves, about twice "
           f"the CPU over the cookbook on the demo warehouse; `--conf {JIT_SETTING}=full` "
           f"for long queries over a large warehouse), full otherwise. The same JVM of the "
           f"pipeline jobs and `sharestate sql` on a `local[...]` master runs the serial "
           f"collector from an initial heap of 64 MiB (`{' '.join(LEAN_HEAP)}`), so its heap "
           f"follows what it holds rather than the machine's memory and the allocation rate "
           f"(`sharestate run` on a few megabytes: about 350 MB where G1 from the JVM's "
           f"default start took 450-560); a collector (`-XX:+Use…GC`) or initial heap "
           f"(`-Xms`, `-XX:InitialHeapSize`) in `spark.driver.extraJavaOptions` replaces ours, "
           f"and `spark.driver.memory` stays the heap's maximum. `{VERBOSE_CONF} true` "
           f"(`--verbose`) leaves that JVM's "
           f"console to Spark: its banner, log lines and progress bars; by default it logs "
           f"warnings without Spark's start-up notices, draws no progress bars and serves no "
           f"web UI, and the command prints a line per phase instead (see "
           f"`sharestate/spark/console.py`). `{LAG_BIN_SETTING}` (default {BIN_ROWS:,}) is the "
           f"most history rows a task of the analytics job reads and sorts in memory to walk "
           f"its share groups' lag history, about 90 bytes a row besides the 150-250 MB of "
           f"reading the files; past it the job deals the groups into more tasks than cores "
           f"(each reads the files again, up to {BINS_PER_CORE} a core and {MOST_BINS} in all), "
           f"and past those, or for a group larger than that, or on more than {MOST_BINS} cores, "
           f"lets Spark shuffle and sort the rows (it moves them once; on few cores slower, "
           f"spilling to disk), as it does at 0 (see `sharestate/analytics/lag_bins.py`).\n\n")
    yield "| setting | default | when |\n|---|---|---|\n"
    for key, value in DEFAULTS.items():
        yield f"| `{key}` | `{value}` | always |\n"
    for key, value in LOCAL_DEFAULTS.items():
        shown = "the repository root" if key.endswith("PYTHONPATH") else f"`{value}`"
        yield f"| `{key}` | {shown} | `local[...]` master |\n"
    for key, value in QUIET.items():
        yield f"| `{key}` | `{value}` | a JVM the command starts, without `{VERBOSE_CONF}` |\n"
    yield "\n"


def _environment() -> Iterator[str]:
    from sharestate.cluster.kafka_options import ENV_PREFIX
    from sharestate.jars import CACHE_ENV
    from sharestate.native import PURE_PYTHON_ENV
    from sharestate.quality.config import CONF_ENV
    from sharestate.spark.session import CONF_FILE_ENV

    yield "## Environment variables\n"
    yield "| variable | what |\n|---|---|\n"
    for name, what in (
            (CONF_FILE_ENV, "Spark conf file replacing `conf/spark-defaults.conf`"),
            (CONF_ENV, "quality settings file replacing `conf/quality.toml`"),
            (CACHE_ENV, "cache folder of the Spark class archive and of the jars `make jars` "
             "fetches (`jars/`); default `$XDG_CACHE_HOME/sharestate`, else "
             "`~/.cache/sharestate`"),
            (f"{ENV_PREFIX}<PROPERTY>", "a client setting of a `kafka://` source, e.g. "
             f"`{ENV_PREFIX}SASL_PASSWORD` for `sasl.password`: secrets stay out of "
             "arguments, logs and tables"),
            (PURE_PYTHON_ENV, "`1`: use the pure-Python decoder and replay instead of the "
             "C extension (identical results, slower); at install time, do not build the "
             "extension (no C compiler needed; ignored under CI)")):
        yield f"| `{name}` | {what} |\n"
    yield "\n"


def _quality() -> Iterator[str]:
    from sharestate.quality.config import QualityConfig

    defaults = QualityConfig()
    yield "## Data-quality settings\n"
    yield ("Keys of `conf/quality.toml` (commented there) and their built-in defaults, "
           "used for a key the file leaves out:\n\n")
    yield "| key | default |\n|---|---|\n"
    for field in fields(QualityConfig):
        if field.name != "source":
            yield f"| `{field.name}` | `{getattr(defaults, field.name)!r}` |\n"
    yield "\n"


def render() -> str:
    """The whole page."""
    parts = ["# Configuration reference\n\n",
             "Generated by `python -m sharestate.app.reference` from the code; do not edit.\n\n"]
    for section in (_commands, _jobs, _spark, _environment, _quality):
        parts.extend(f"{part}\n" if part.startswith("#") else part for part in section())
    return "".join(parts)


if __name__ == "__main__":
    print(render(), end="")
