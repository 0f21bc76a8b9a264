"""sharestate: Kafka's `__share_group_state` and `__consumer_offsets` logs -> Delta tables.

One run = one data interval `[data_interval_start, data_interval_end)` of the
`CronDataIntervalTimetable` (hourly by default, `$SHARESTATE_DAG_SCHEDULE` at parse time
overrides the cron). Five tasks, in a chain:

    ingest -> decode -> replay -> analytics -> quality

Each Spark task is `spark-submit pipelines/<job>.py` (`SparkSubmitOperator`); `quality` runs
the data-quality command and is the gate: the run fails when it fails.

**Interval -> offsets.** `ingest` reads whole segments, incrementally (segments new or
changed since the last run, by size and mtime, whatever their timestamps; a `kafka://`
source from the offsets the last run reached). `replay` and
`analytics` get `--as-of-time data_interval_end`: every state-topic partition is replayed
from the log start up to (not including) its first record with a timestamp later than the
interval end, so `share_partition_state` is the state as of `data_interval_end`. The interval
start cuts nothing (state is cumulative; Kafka's loader also starts at the log start); it is
recorded. Every job of a run gets the same `--run-id airflow-<start>-<end>` (UTC,
`%Y%m%dT%H%M%SZ`), which `ingest_runs` and every table commit record (replay's commits also
record `as_of`), and the Spark conf `spark.sharestate.interval=<start>/<end>` (ISO 8601).
A run without a data interval (a manual run with no logical date) uses `run_after` for both.

**Lag through time.** `analytics` gets every `kafka://` source as `--end-offsets-from` (and
the `end_offsets_from` setting's sources, and the `kafka_options`): each run asks the live
cluster the data topics' end offsets at the share groups' state changes (ListOffsets by
timestamp, within the topics' retention) and adds them to `topic_end_offsets`, which keeps
them after the records are deleted, so the scheduled runs accumulate the exact
`share_group_lag_history`.

**Re-runs.** Clearing a run re-runs the same interval with the same arguments and run id;
the jobs are idempotent (ingest/decode replace the segments they read, replay/analytics
recompute and replace their tables), so the gold tables come out the same as long as the
bronze `log_records` still hold the records up to the interval end.

**Exit status** (sharestate's scheme: 0 clean, 1 findings, 2 bad arguments or an environment
that cannot run, 3 the quality gate could not run, 75 a live source did not answer, 70 an
internal error). A Spark job: 0 succeeds; 1 after the job's closing line `tables in ... (run
ID)` = it completed with findings (decode errors, audit warnings): the task succeeds with a
warning and pushes XCom `findings=True`, unless the setting `fail_on_findings` is true (then
it fails without retries); 2 fails without retries (a setting to fix: retrying cannot help);
anything else fails and is retried: 75 (the cluster, or the serve asked for end offsets, did
not answer or stopped answering: a broker restarting, a partition without a leader), 70 (a
bug in sharestate, traceback in the log), 1 without the closing line (spark-submit's own
failures exit 1, and in cluster mode its output is not the driver's), a signal. The
`quality` command: 0 passes; 1 (a gate failed) and 2 (bad settings) fail the run without
retry; anything else (3 the gate could not run, 70) fails and is retried once.

**Catchup and backfill.** `catchup=False`: when the DAG is unpaused, or after runs were
blocked (`max_active_runs=1`), only the latest complete interval is scheduled; intervals in
between are skipped, which loses nothing (each run recomputes the state as of its own
interval end from the whole log). `max_active_runs=1` because all runs write the same
tables. A backfill (`airflow backfill create --dag-id sharestate --from-date ...
--to-date ...`) runs its intervals one at a time, oldest first; each one *replaces* the
gold tables with the state as of its own interval end, so the tables end up as of the last
interval backfilled. Backfill into another warehouse (`--dag-run-conf '{"warehouse":
"/lake/sharestate-backfill"}'`), or re-run the latest interval afterwards.

**Settings** (a DAG-run param wins, else the Airflow Variable `sharestate_<name>`, else the
default): `spark_conn_id` (`spark_default`), `source` (required: log.dirs roots, segment
paths or `kafka://` URIs, a JSON list or whitespace-separated), `warehouse` (required),
(`source`, `warehouse`, `end_offsets` and `end_offsets_from` must be absolute paths or URIs:
a relative path fails the task without retry, as the tasks run in different working
directories), `pipelines_dir` (the `pipelines/` folder beside this file's repository),
`py_files` (e.g. the sharestate wheel, for a cluster), `spark_conf` (JSON object of extra
Spark settings), `semantics`, `delivery_limit`, `end_offsets` (JSON file for the lag),
`end_offsets_from` (more sources of end offsets through time: `kafka://`, `http://` of
`sharestate serve`, log.dirs folders of the data topics), `kafka_options` (JSON object),
`full_ingest`, `fail_on_findings`, `quality_command` (run by bash with
`SHARESTATE_WAREHOUSE`, `SHARESTATE_RUN_ID`, `SHARESTATE_INTERVAL_START`,
`SHARESTATE_INTERVAL_END` set; default `sharestate quality --warehouse
"$SHARESTATE_WAREHOUSE"`), `maintain_command` (run by bash the same way after the gate
passed; default `sharestate maintain --warehouse "$SHARESTATE_WAREHOUSE"`: small files
merged, files no version of the last 7 days reads deleted, logs checkpointed, so that a
year of hourly runs reads as fast as the first; `true` to skip it).

**Timeouts and retries.** Spark tasks retry twice (5 min, doubling, at most 30 min apart);
each task has an `execution_timeout`, and `dagrun_timeout` (4 h) fails a run that overruns.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, CronDataIntervalTimetable, Param
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from jinja2 import pass_context
from jinja2.runtime import Context as JinjaContext

DAG_ID = "sharestate"
VARIABLE_PREFIX = "sharestate_"
SCHEDULE = os.environ.get("SHARESTATE_DAG_SCHEDULE", "0 * * * *")
# sharestate's exit statuses (sharestate/exit_codes.py; this file imports nothing of sharestate)
FINDINGS_EXIT = 1
"""A job completed with findings (after its closing line); the quality gate failed."""
USAGE_EXIT = 2
"""Bad arguments, unusable input or an environment that cannot run: retrying cannot help."""
UNAVAILABLE_EXIT = 75
"""A live source did not answer, or stopped answering: a retry later may find it back."""
INTERNAL_EXIT = 70
"""An unhandled exception: a bug in sharestate."""
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_PIPELINES_DIR = str(REPO_ROOT / "pipelines")
DEFAULT_QUALITY_COMMAND = 'sharestate quality --warehouse "$SHARESTATE_WAREHOUSE"'
DEFAULT_MAINTAIN_COMMAND = 'sharestate maintain --warehouse "$SHARESTATE_WAREHOUSE"'
RUN_ID_TIME = "%Y%m%dT%H%M%SZ"
TRUE = ("1", "true", "yes", "on")
URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
KAFKA_SCHEME = "kafka://"
USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s]*@")
"""A URL with a user name or password (`kafka://user:secret@host:9092`)."""


# -- template macros ----------------------------------------------------------------------


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, Mapping | list):
        return json.dumps(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


@pass_context
def setting(ctx: JinjaContext, name: str, default: str = "", required: bool = False,
            locations: bool = False) -> str:
    """Setting `name`: the DAG-run param, else the Variable `sharestate_<name>`, else `default`.

    With `locations`, each of its items (see `options`) must be an absolute path or a URI:
    the tasks run in different working directories, so a relative path has no one meaning.
    """
    value = (ctx.get("params") or {}).get(name)
    if _blank(value):
        variables = (ctx.get("var") or {}).get("value")
        value = variables.get(VARIABLE_PREFIX + name, None) if variables is not None else None
    if _blank(value):
        if required:
            raise AirflowFailException(f"sharestate: set the DAG param {name!r} or the Airflow "
                                       f"Variable {VARIABLE_PREFIX + name!r}")
        value = default
    text = _text(value)
    if locations:
        for item in _items(text):
            if USERINFO.match(item):  # shown nowhere: not in this error, nor in a command line
                raise AirflowFailException(
                    f"sharestate: the setting {name!r} holds a URL with a user name or "
                    f"password (not shown): give Kafka's user in kafka_options as "
                    f"sasl.username and its password as SHARESTATE_KAFKA_SASL_PASSWORD in the "
                    f"workers' environment")
            if not (item.startswith("/") or URI.match(item)):
                raise AirflowFailException(
                    f"sharestate: the setting {name!r} must be an absolute path or a URI, not "
                    f"{item!r} (the tasks run in different working directories)")
    return text


def _interval(ctx: JinjaContext) -> tuple[datetime, datetime]:
    start, end = ctx.get("data_interval_start"), ctx.get("data_interval_end")
    if start is None or end is None:  # a run without a logical date
        start = end = ctx["dag_run"].run_after
    return start.astimezone(UTC), end.astimezone(UTC)


@pass_context
def interval_start(ctx: JinjaContext) -> str:
    """The data interval's start, ISO 8601 in UTC."""
    return _interval(ctx)[0].isoformat()


@pass_context
def interval_end(ctx: JinjaContext) -> str:
    """The data interval's end (the replay's as-of time), ISO 8601 in UTC."""
    return _interval(ctx)[1].isoformat()


@pass_context
def pipeline_run_id(ctx: JinjaContext) -> str:
    """The run id all jobs of this data interval record: `airflow-<start>-<end>`."""
    start, end = _interval(ctx)
    return f"airflow-{start.strftime(RUN_ID_TIME)}-{end.strftime(RUN_ID_TIME)}"


def option(flag: str, value: str) -> str:
    """`flag=value`, or '' when `value` is blank."""
    return f"{flag}={value.strip()}" if value.strip() else ""


def options(flag: str, value: str) -> str:
    """One `flag=item` line per item of `value`: a JSON list, a JSON object (items
    `key=value`) or whitespace-separated words; '' when there are none."""
    return "\n".join(f"{flag}={item}" for item in _items(value))


def _items(value: str) -> list[str]:
    text = value.strip()
    items: list[str]
    if text.startswith(("[", "{")):
        parsed = json.loads(text)
        items = ([f"{k}={_text(v)}" for k, v in parsed.items()] if isinstance(parsed, dict)
                 else [_text(v) for v in parsed])
    else:
        items = text.split()
    return [item for item in items if item]


def kafka_sources(value: str) -> str:
    """The `kafka://` items of a sources setting (see `options`), as a JSON list."""
    return json.dumps([item for item in _items(value) if item.startswith(KAFKA_SCHEME)])


def switch(flag: str, value: str) -> str:
    """`flag` when `value` is true ('true', '1', 'yes', 'on'), else ''."""
    return flag if value.strip().lower() in TRUE else ""


DEFAULTS = {"spark_conn_id": "spark_default", "pipelines_dir": DEFAULT_PIPELINES_DIR,
            "spark_conf": "{}", "quality_command": DEFAULT_QUALITY_COMMAND,
            "maintain_command": DEFAULT_MAINTAIN_COMMAND}
MACROS = {"setting": setting, "interval_start": interval_start, "interval_end": interval_end,
          "pipeline_run_id": pipeline_run_id, "option": option, "options": options,
          "kafka_sources": kafka_sources, "switch": switch,
          "defaults": DEFAULTS}


# -- operators ----------------------------------------------------------------------------


class SharestateSparkSubmitOperator(SparkSubmitOperator):
    """`SparkSubmitOperator` for a sharestate job.

    On top of the base operator: `spark_conn_id` is templated; `extra_conf` (templated, a JSON
    object) is merged into `conf`; each rendered `application_args` item is split into lines
    and blank lines dropped (so optional arguments render to ''); exit status 1 (findings)
    succeeds with a warning and XCom `findings=True` unless `fail_on_findings` renders true;
    exit status 2 (a setting to fix) fails without retries.
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields,
                                      "spark_conn_id", "extra_conf", "fail_on_findings")

    def __init__(self, *, spark_conn_id: str = "spark_default", extra_conf: str = "{}",
                 fail_on_findings: str = "false", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spark_conn_id = spark_conn_id
        self.extra_conf = extra_conf
        self.fail_on_findings = fail_on_findings

    def execute(self, context: Any) -> None:
        self._conn_id = self.spark_conn_id  # the base class reads it when it builds its hook
        self.conf = {**(self.conf or {}), **self._parsed_extra_conf()}
        self.application_args = [line.strip() for arg in self.application_args or []
                                 for line in str(arg).splitlines() if line.strip()]
        try:
            super().execute(context)
        except AirflowException:
            status = self._exit_status()
            if status == USAGE_EXIT:
                raise AirflowFailException(
                    f"{self.task_id}: bad arguments or an environment that cannot run (exit "
                    f"{USAGE_EXIT}): fix the settings; not retried") from None
            if status == UNAVAILABLE_EXIT:
                self.log.warning("%s: a live source did not answer (exit %d); retrying",
                                 self.task_id, UNAVAILABLE_EXIT)
            if status == INTERNAL_EXIT:
                self.log.error("%s: internal error in sharestate (exit %d): a bug, see the "
                               "traceback above; retrying", self.task_id, INTERNAL_EXIT)
            if not self._completed_with_findings():
                raise
            if str(self.fail_on_findings).strip().lower() in TRUE:
                raise AirflowFailException(
                    f"{self.task_id} recorded findings (exit {FINDINGS_EXIT}) and "
                    "fail_on_findings is set") from None
            self.log.warning("%s completed with findings (exit %d): see audit_findings and "
                             "decode_errors; the quality task decides", self.task_id,
                             FINDINGS_EXIT)
            context["ti"].xcom_push(key="findings", value=True)
            return
        context["ti"].xcom_push(key="findings", value=False)

    def _parsed_extra_conf(self) -> dict[str, str]:
        text = (self.extra_conf or "").strip() or "{}"
        try:
            extra = json.loads(text)
        except ValueError as exc:
            raise AirflowFailException(f"spark_conf is not JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise AirflowFailException("spark_conf must be a JSON object of Spark settings")
        return {str(k): _text(v) for k, v in extra.items()}

    def _exit_status(self) -> int | None:
        """spark-submit's exit status (the driver's in client/local mode), if known."""
        process = getattr(self._hook, "_submit_sp", None)
        status = getattr(process, "returncode", None)
        return status if isinstance(status, int) else None

    def _completed_with_findings(self) -> bool:
        """Whether the job exited 1 *after* printing its closing line, `tables in ... (run
        ID)`: spark-submit's own failures exit 1 too. Known only in client/local mode (the
        exit status and output of spark-submit); elsewhere exit 1 stays a failure."""
        if self._exit_status() != FINDINGS_EXIT:
            return False
        run_ids = [arg.split("=", 1)[1] for arg in self.application_args or []
                   if arg.startswith("--run-id=")]
        tail = list(getattr(self._hook, "_last_submit_log_lines", ()))
        return bool(run_ids) and any(line.startswith("tables in ")
                                     and line.endswith(f"(run {run_ids[-1]})") for line in tail)


class CommandOperator(BashOperator):
    """Runs a sharestate command through bash: 0 succeeds; a status in `not_retried` fails
    without retrying, with its message; anything else (70 a bug, ...) is retried."""

    def __init__(self, *, not_retried: Mapping[int, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.not_retried = dict(not_retried)

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except AirflowException:
            process = getattr(self.subprocess_hook, "sub_process", None)
            status = getattr(process, "returncode", None)
            if status in self.not_retried:
                raise AirflowFailException(f"sharestate: {self.not_retried[status]}") from None
            raise


# -- the DAG ------------------------------------------------------------------------------

SPARK_CONF = {
    "spark.sharestate.interval": "{{ interval_start() }}/{{ interval_end() }}",
    "spark.sharestate.airflow.dag_run": "{{ run_id }}",
}
WAREHOUSE_SETTING = "{{ setting('warehouse', required=True, locations=True) }}"
WAREHOUSE = f"--warehouse={WAREHOUSE_SETTING}"
RUN_ID = "--run-id={{ pipeline_run_id() }}"
AS_OF = "--as-of-time={{ interval_end() }}"
DELIVERY_LIMIT = "{{ option('--delivery-limit', setting('delivery_limit')) }}"
JOB_ARGS: dict[str, list[str]] = {
    "ingest": [WAREHOUSE, RUN_ID,
               "{{ options('--source', setting('source', required=True, locations=True)) }}",
               "{{ options('--kafka-option', setting('kafka_options')) }}",
               "{{ switch('--full', setting('full_ingest', 'false')) }}"],
    "decode": [WAREHOUSE, RUN_ID],
    "replay": [WAREHOUSE, RUN_ID, AS_OF, "{{ option('--semantics', setting('semantics')) }}",
               DELIVERY_LIMIT],
    "analytics": [WAREHOUSE, RUN_ID, AS_OF,
                  "{{ option('--end-offsets', setting('end_offsets', locations=True)) }}",
                  DELIVERY_LIMIT,
                  "{{ options('--end-offsets-from', kafka_sources(setting('source', "
                  "required=True, locations=True))) }}",
                  "{{ options('--end-offsets-from', setting('end_offsets_from', "
                  "locations=True)) }}",
                  "{{ options('--kafka-option', setting('kafka_options')) }}"],
}
TIMEOUTS = {"ingest": timedelta(hours=2), "decode": timedelta(hours=1),
            "replay": timedelta(hours=2), "analytics": timedelta(hours=1),
            "quality": timedelta(minutes=30), "maintain": timedelta(minutes=30)}


def _param(description: str, kind: str = "string") -> Param:
    return Param(None, type=["null", kind], description=description)


PARAMS = {
    "spark_conn_id": _param("Spark connection id (default: Variable sharestate_spark_conn_id, "
                            "else spark_default)"),
    "source": _param("log.dirs roots, partition dirs, segment files or kafka://host:port "
                     "URIs: a JSON list, or separated by whitespace"),
    "warehouse": _param("folder (or URI) holding the Delta tables"),
    "pipelines_dir": _param("folder holding pipelines/{ingest,decode,replay,analytics}.py"),
    "py_files": _param("spark-submit --py-files (e.g. the sharestate wheel)"),
    "spark_conf": _param("extra Spark settings", "object"),
    "semantics": _param("replay semantics: kafka or transactional-acks"),
    "delivery_limit": _param("group.share.delivery.count.limit, for poison ranges", "integer"),
    "end_offsets": _param("JSON file of topic end offsets, for the lag"),
    "end_offsets_from": _param("sources of the data topics' end offsets through time, for the "
                               "lag history, besides the kafka:// sources (used already): "
                               "kafka:// URIs, http:// of sharestate serve, log.dirs folders"),
    "kafka_options": _param("client settings for a kafka:// source (secrets: SHARESTATE_KAFKA_* "
                            "in the worker's environment)", "object"),
    "full_ingest": _param("re-ingest every segment", "boolean"),
    "fail_on_findings": _param("fail a Spark task whose job exits 1 (findings)", "boolean"),
    "maintain_command": _param("maintenance command (bash) after the gate passed; exit 2 = bad "
                               "settings (not retried); `true` skips it"),
    "quality_command": _param("data-quality command (bash); exit 1 = a gate failed, 2 = bad "
                              "settings (neither retried)"),
}

with DAG(
    dag_id=DAG_ID,
    description="Kafka share-group state and consumer offsets -> Delta tables, as of each "
                "interval end",
    schedule=CronDataIntervalTimetable(SCHEDULE, timezone="UTC"),
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=4),
    default_args={
        "owner": "sharestate",
        "depends_on_past": False,
        "retries": 2,
        "retry_delay": timedelta(minutes=5),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(minutes=30),
    },
    params=PARAMS,
    user_defined_macros=MACROS,
    tags=["sharestate", "kafka", "spark", "delta"],
    doc_md=__doc__,
) as dag:
    previous = None
    for job, arguments in JOB_ARGS.items():
        task = SharestateSparkSubmitOperator(
            task_id=job,
            spark_conn_id="{{ setting('spark_conn_id', defaults.spark_conn_id) }}",
            application="{{ setting('pipelines_dir', defaults.pipelines_dir) }}/" + f"{job}.py",
            py_files="{{ setting('py_files') }}",
            conf=dict(SPARK_CONF),
            extra_conf="{{ setting('spark_conf', defaults.spark_conf) }}",
            application_args=list(arguments),
            fail_on_findings="{{ setting('fail_on_findings', 'false') }}",
            name=f"sharestate-{job}-{{{{ pipeline_run_id() }}}}",
            execution_timeout=TIMEOUTS[job],
        )
        if previous is not None:
            previous >> task
        previous = task

    command_env = {
        "SHARESTATE_WAREHOUSE": WAREHOUSE_SETTING,
        "SHARESTATE_RUN_ID": "{{ pipeline_run_id() }}",
        "SHARESTATE_INTERVAL_START": "{{ interval_start() }}",
        "SHARESTATE_INTERVAL_END": "{{ interval_end() }}",
    }
    bad_settings = f"arguments or settings are bad (exit {USAGE_EXIT}); not retried"
    # quality: 1 a gate failed, 2 bad settings (neither retried), 3 could not run (retried)
    quality, maintain = (
        CommandOperator(
            task_id=task_id,
            bash_command=f"{{{{ setting('{task_id}_command', defaults.{task_id}_command) }}}}",
            env=command_env,
            append_env=True,
            skip_on_exit_code=None,
            retries=1,
            execution_timeout=TIMEOUTS[task_id],
            not_retried=not_retried,
        )
        for task_id, not_retried in (
            ("quality", {FINDINGS_EXIT: "a data-quality gate failed",
                         USAGE_EXIT: f"the quality command's {bad_settings}"}),
            ("maintain", {USAGE_EXIT: f"the maintenance command's {bad_settings}"})))
    if previous is not None:
        previous >> quality
    quality >> maintain
