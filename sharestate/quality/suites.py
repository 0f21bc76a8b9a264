"""The gate's Great Expectations suites, defined in code and versioned.

A `Suite` names the gold table it reads, how to build the frame it validates (the table,
or a frame from `sharestate.quality.derive`) and its `Check`s: one expectation each, with
a stable name (what results, audit findings and tests refer to), a family and a severity.
Bump a suite's `version` whenever its checks change; `fingerprint()` records exactly what
ran in every result row.

Families: keys, batch_offsets, batch_order, delivery_state, delivery_count, spso, lag,
orphans, decode_errors.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sharestate.analytics.lag import AVAILABLE
from sharestate.quality import derive
from sharestate.quality.config import QualityConfig, Severity

if TYPE_CHECKING:
    from great_expectations.expectations import Expectation
    from pyspark.sql import DataFrame

Reader = Callable[[str], "DataFrame"]
"""Reads a gold table by name."""
FrameBuilder = Callable[[Reader, QualityConfig, dt.date], "DataFrame"]

HISTORY_KEY = (*derive.SHARE_KEY, "record_offset")


@dataclass(frozen=True)
class Check:
    """One expectation of a suite and what its failure means."""

    name: str
    family: str
    severity: Severity
    description: str
    expectation: Expectation

    def configuration(self) -> dict[str, Any]:
        """What the check asserts, as JSON-able data (no generated ids)."""
        return {"name": self.name, "family": self.family, "severity": self.severity,
                "type": self.expectation.expectation_type,
                "kwargs": self.expectation.configuration.kwargs}


@dataclass(frozen=True)
class Suite:
    """A versioned expectation suite over one gold table."""

    name: str
    table: str
    version: str
    frame: FrameBuilder
    checks: tuple[Check, ...]
    index_columns: tuple[str, ...] = field(default=())
    """Columns that identify a failing row in the results' samples."""

    def fingerprint(self) -> str:
        """A short hash of the checks' configurations."""
        text = json.dumps([c.configuration() for c in self.checks], sort_keys=True,
                          default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check(name: str, family: str, description: str, kind: type[Expectation],
           severity: Severity = "error", **kwargs: Any) -> Check:
    from great_expectations.expectations.metadata_types import FailureSeverity

    expectation = kind(**kwargs, description=description,
                       meta={"check": name, "family": family, "severity": severity},
                       severity=(FailureSeverity.CRITICAL if severity == "error"
                                 else FailureSeverity.WARNING))
    return Check(name, family, severity, description, expectation)


def _unique(columns: Sequence[str], what: str) -> Check:
    import great_expectations.expectations as gxe

    return _check("keys_unique", "keys", f"One row per {what}.",
                  gxe.ExpectCompoundColumnsToBeUnique, column_list=list(columns))


def batch_checks(config: QualityConfig) -> tuple[Check, ...]:
    """The checks on `derive.state_batches` frames."""
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    limit = config.delivery_count_limit
    checks = [
        _check("batch_first_le_last", "batch_offsets",
               "Every state batch has first_offset <= last_offset.",
               gxe.ExpectColumnPairValuesAToBeGreaterThanB,
               column_A="last_offset", column_B="first_offset", or_equal=True),
        _check("batch_order", "batch_order",
               "State batches are sorted and do not overlap: each starts after the last "
               "offset of the one before it.",
               gxe.ExpectColumnPairValuesAToBeGreaterThanB,
               column_A="first_offset", column_B="prev_last_offset", or_equal=False,
               ignore_row_if="either_value_is_missing"),
        _check("delivery_count_range", "delivery_count",
               f"Delivery counts of acquired, acknowledged and archived records are between 1 "
               f"and the delivery limit ({limit}).",
               gxe.ExpectColumnValuesToBeBetween,
               column="delivery_count", min_value=1, max_value=limit,
               row_condition=Column("delivery_state") != AVAILABLE),
        # Kafka writes an available record with delivery count 0 when an acquisition is
        # released without counting as a delivery (Kafka 4.1.2: the records a console share
        # consumer fetched beyond --max-messages, released as it closed).
        _check("delivery_count_range[available]", "delivery_count",
               f"Delivery counts of available records are between 0 and the delivery limit "
               f"({limit}).",
               gxe.ExpectColumnValuesToBeBetween,
               column="delivery_count", min_value=0, max_value=limit,
               row_condition=Column("delivery_state") == AVAILABLE),
    ]
    dialects = sorted(d for d in config.delivery_states if d != "default")
    for dialect in dialects:
        states = list(config.states_for(dialect))
        checks.append(_check(
            f"delivery_state_allowed[{dialect}]", "delivery_state",
            f"Delivery states of {dialect}-dialect records are in {states}.",
            gxe.ExpectColumnValuesToBeInSet, column="delivery_state", value_set=states,
            row_condition=Column("dialect") == dialect))
    default = list(config.states_for("default"))
    checks.append(_check(
        "delivery_state_allowed[default]", "delivery_state",
        f"Delivery states of records of other dialects are in {default}.",
        gxe.ExpectColumnValuesToBeInSet, column="delivery_state", value_set=default,
        row_condition=Column("dialect").is_not_in(dialects) if dialects else None))
    return tuple(checks)


def _spso_check() -> Check:
    import great_expectations.expectations as gxe

    return _check("spso_monotonic", "spso",
                  "The SPSO never moves backwards within a state epoch of a key (a tombstone "
                  "starts the key afresh).",
                  gxe.ExpectColumnPairValuesAToBeGreaterThanB,
                  column_A="start_offset", column_B="prev_start_offset", or_equal=True,
                  ignore_row_if="either_value_is_missing")


def _lag_check() -> Check:
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    exact = Column("lag_is_lower_bound") == False  # noqa: E712 - builds a condition
    return _check("lag_non_negative", "lag",
                  "Lag is >= 0 where the end offset is exact (lag_is_lower_bound false).",
                  gxe.ExpectColumnValuesToBeBetween, column="lag", min_value=0,
                  row_condition=exact)


def _orphan_check() -> Check:
    import great_expectations.expectations as gxe

    return _check("no_orphaned_state", "orphans",
                  "No share-partition has state that its group's metadata does not list "
                  "(audit rule orphaned_state).",
                  gxe.ExpectColumnValuesToNotBeInSet, severity="warning", column="rule",
                  value_set=["orphaned_state"])


def _decode_check() -> Check:
    import great_expectations.expectations as gxe

    return _check("decode_errors_acknowledged", "decode_errors",
                  "Every decode error is accepted by an entry of the acknowledgement file.",
                  gxe.ExpectColumnValuesToNotBeNull, column="acknowledged_by")


def _table(name: str) -> FrameBuilder:
    return lambda read, _config, _today: read(name)


def suites(config: QualityConfig) -> tuple[Suite, ...]:
    """Every suite of the gate, built for `config`."""
    key, state, history = derive.SHARE_KEY, "share_partition_state", \
        "share_partition_state_history"
    return (
        Suite(state, state, "1", _table(state),
              (_unique(key, "share-partition (group, topic, partition)"),),
              index_columns=key),
        Suite(f"{state}.batches", state, "2",
              lambda read, _c, _d: derive.state_batches(read(state)),
              batch_checks(config), index_columns=(*key, "batch_index")),
        Suite(history, history, "1",
              lambda read, _c, _d: derive.spso_steps(read(history)),
              (_unique(HISTORY_KEY, "share-partition and applied record"), _spso_check()),
              index_columns=HISTORY_KEY),
        Suite(f"{history}.batches", history, "2",
              lambda read, _c, _d: derive.state_batches(read(history), HISTORY_KEY),
              batch_checks(config), index_columns=(*HISTORY_KEY, "batch_index")),
        Suite("share_group_lag", "share_group_lag", "1", _table("share_group_lag"),
              (_unique(key, "share-partition"), _lag_check()), index_columns=key),
        Suite("audit_findings", "audit_findings", "1",
              lambda read, _c, _d: read("audit_findings").where("rule <> 'quality_gate'"),
              (_orphan_check(),), index_columns=("group_id", "topic_id", "share_partition")),
        Suite("decode_errors", "decode_errors", "1",
              lambda read, config, today: derive.acknowledged_errors(
                  read("decode_errors"), config.acknowledgements, today),
              (_decode_check(),), index_columns=("source", "offset", "position", "kind")),
    )
