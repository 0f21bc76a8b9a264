"""The read-only SQL door of `sharestate sql`: a statement runs only if its plan is a query.

`check_statement` parses the statement with the session's own parser (Delta's, where Delta
is wired) and checks the plan *before anything runs*: every operator of the parsed plan
must be a query operator listed here (an allowlist: a statement Spark runs while it is
analysed, such as `EXECUTE IMMEDIATE`, or that writes when executed, such as `INSERT`,
`CREATE TABLE ... AS`, `INSERT OVERWRITE DIRECTORY`, `SET`, `ADD JAR`, `DELETE`, `MERGE`,
`VACUUM`, a SQL script, is never analysed). The analysed plan is then checked the same way,
subqueries included, and no expression may call out of SQL: `reflect`, `java_method`,
`try_reflect` call Java methods, `TRANSFORM ... USING` runs a program, user-defined
functions run code. Spark's own settings close the rest (`session_settings`): no SQL on
file paths (`parquet.`/path``: only the warehouse's tables are readable), and a throw-away
`spark.sql.warehouse.dir`, so that a catalog lookup creates nothing in the current folder.

`write=True` (`sharestate sql --write`) also lets through Delta's statements that change a
warehouse table named in the catalog, and nothing else (`WRITE_OPERATORS`, again an
allowlist): DELETE, UPDATE, MERGE, OPTIMIZE, VACUUM (under Delta's retention check, which
`session_settings` holds on) and RESTORE. A table named by its path, a VACUUM over an
inventory, and every statement that writes outside the tables (INSERT OVERWRITE DIRECTORY,
CREATE TABLE ... LOCATION, CONVERT TO DELTA, CLONE, CREATE DATABASE ... LOCATION) are
refused; call-outs stay refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ERROR_CLASS = "SHARESTATE_READ_ONLY"

_LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
_ANALYSIS = "org.apache.spark.sql.catalyst.analysis."
_EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions."
_EXECUTION = "org.apache.spark.sql.execution."
_DELTA = "org.apache.spark.sql.delta.commands."
_VACUUM = "io.delta.tables.execution.VacuumTableCommand"

QUERY_OPERATORS = frozenset(
    [_LOGICAL + name for name in (
        "Aggregate", "CTERelationDef", "CTERelationRef", "Deduplicate", "Distinct", "Except",
        "Expand", "Filter", "Generate", "GlobalLimit", "Intersect", "Join", "LateralJoin",
        "LimitAll", "LocalLimit", "LocalRelation", "Offset", "OneRowRelation", "Pivot",
        "Project", "Range", "RebalancePartitions", "Repartition", "RepartitionByExpression",
        "ResolvedHint", "Sample", "Sort", "SubqueryAlias", "Tail", "Union", "Unpivot",
        "UnresolvedHint", "UnresolvedWith", "View", "Window", "WithCTE",
        "WithWindowDefinition")]
    + [_ANALYSIS + name for name in (
        "UnresolvedHaving", "UnresolvedInlineTable", "UnresolvedQualify", "UnresolvedRelation",
        "UnresolvedSubqueryColumnAliases", "UnresolvedTableValuedFunction")]
    + [_ANALYSIS + "RelationTimeTravel", _ANALYSIS + "UnresolvedTable",
       _DELTA + "DescribeDeltaHistory", _DELTA + "DescribeDeltaHistoryCommand"]
    + [_EXPRESSIONS + "PipeOperator", _EXECUTION + "LogicalRDD",
       _EXECUTION + "datasources.LogicalRelation",
       _EXECUTION + "datasources.v2.DataSourceV2Relation"])
"""Plan operators (parsed or analysed) a query is made of: reading (Delta's time travel and
`DESCRIBE HISTORY` included), relational algebra, limits, sampling, hints. Anything else is
refused."""
DELTA_SQL = {_ANALYSIS + "RelationTimeTravel": "time travel (VERSION AS OF, TIMESTAMP AS OF)",
             _DELTA + "DescribeDeltaHistory": "DESCRIBE HISTORY"}
"""Delta SQL that needs the tables in the catalog of the `jvm` backend."""

WRITE_OPERATORS = frozenset(
    [_LOGICAL + name for name in ("DeleteFromTable", "UpdateTable", "MergeIntoTable",
                                  "RestoreTableStatement")]
    + [_DELTA + name for name in ("DeleteCommand", "UpdateCommand", "MergeIntoCommand",
                                  "OptimizeTableCommand", "RestoreTableCommand")]
    + [_VACUUM, "org.apache.spark.sql.catalyst.TimeTravel", _ANALYSIS + "ResolvedTable"])
"""Plan operators (parsed or analysed, with Delta's SQL) of the statements `--write` runs
besides queries: DELETE, UPDATE, MERGE, OPTIMIZE, VACUUM, RESTORE of a table by name."""
WRITES = "DELETE, UPDATE, MERGE, OPTIMIZE, VACUUM or RESTORE of a warehouse table"

CALL_OUTS = {
    _EXPRESSIONS + "CallMethodViaReflection": "reflect()/java_method() call Java methods",
    _EXPRESSIONS + "TryReflect": "try_reflect() calls Java methods",
    _LOGICAL + "ScriptTransformation": "TRANSFORM ... USING runs a program",
    _EXECUTION + "command.AddJarsCommand": "ADD JAR loads code",
    _EXECUTION + "command.AddFilesCommand": "ADD FILE fetches files",
    _EXECUTION + "command.AddArchivesCommand": "ADD ARCHIVE fetches files",
    _LOGICAL + "CreateFunction": "CREATE FUNCTION loads code",
    _EXECUTION + "command.CreateFunctionCommand": "CREATE FUNCTION loads code",
}
"""What runs code or programs outside SQL: refused even with `write=True`."""
NEVER = {
    _ANALYSIS + "UnresolvedExecuteImmediate": "EXECUTE IMMEDIATE runs its statement while it "
                                              "is analysed",
    _LOGICAL + "CompoundBody": "a SQL script runs several statements",
}
"""Statements refused even with `write=True`: they run other statements, unchecked."""
_USER_FUNCTION_WORDS = ("UDF", "UDAF", "UDTF")

STATEMENTS = {
    _LOGICAL + "InsertIntoDir": "INSERT OVERWRITE DIRECTORY",
    _LOGICAL + "InsertIntoStatement": "INSERT",
    _LOGICAL + "CreateTableAsSelect": "CREATE TABLE ... AS SELECT",
    _LOGICAL + "ReplaceTableAsSelect": "REPLACE TABLE ... AS SELECT",
    _LOGICAL + "CreateTable": "CREATE TABLE",
    _LOGICAL + "CreateView": "CREATE VIEW",
    _LOGICAL + "DeleteFromTable": "DELETE",
    _LOGICAL + "UpdateTable": "UPDATE",
    _LOGICAL + "MergeIntoTable": "MERGE",
    _EXECUTION + "command.SetCommand": "SET",
    _EXECUTION + "command.ResetCommand": "RESET",
    _EXECUTION + "command.CreateViewCommand": "CREATE VIEW",
    _LOGICAL + "CacheTable": "CACHE TABLE",
    _LOGICAL + "CacheTableAsSelect": "CACHE TABLE ... AS SELECT",
    _LOGICAL + "UncacheTable": "UNCACHE TABLE",
    _LOGICAL + "CreateNamespace": "CREATE DATABASE",
    _LOGICAL + "CloneTableStatement": "CLONE",
    _DELTA + "ConvertToDeltaCommand": "CONVERT TO DELTA",
    _DELTA + "CreateDeltaTableCommand": "CREATE TABLE",
    "org.apache.spark.sql.delta.UnresolvedPathBasedDeltaTable": "a table named by its path",
}
"""Readable names for the refusal message (others are named by their plan operator)."""


class RefusedStatement(Exception):
    """A statement the door does not run; the message says why, in one line."""

    error_class = ERROR_CLASS


def session_settings(scratch: str) -> dict[str, str]:
    """Spark settings for a session that serves the door (set before the JVM starts);
    `scratch` is a throw-away folder for Spark's own catalog."""
    return {"spark.sql.runSQLOnFiles": "false", "spark.sql.warehouse.dir": scratch,
            "spark.databricks.delta.retentionDurationCheck.enabled": "true"}


def check_statement(spark: SparkSession, statement: str, *, write: bool = False,
                    delta_sql: bool = True) -> Any:
    """The statement's parsed plan (a JVM object) when the door may run it, else raise
    RefusedStatement. Parse errors and analysis errors come through as Spark raises them.
    Without `delta_sql` (tables registered as views) Delta's own SQL is refused, saying what
    gives it."""
    from pyspark.errors.exceptions.captured import capture_sql_exception

    session = spark._jsparkSession
    parsed = capture_sql_exception(session.sessionState().sqlParser().parsePlan)(statement)
    jvm: Any = spark._jvm
    if not delta_sql:
        subquery = jvm.java.lang.Class.forName(_EXPRESSIONS + "SubqueryExpression")
        for _kind, node in _nodes(parsed, subquery):
            if (what := DELTA_SQL.get(node.getClass().getName())
                    or _spark_read_describe_history(node)) is not None:
                raise RefusedStatement(
                    f"[{ERROR_CLASS}] {what} needs the jvm backend (Delta's own SQL): "
                    "--backend jvm, with Delta's jars (make jars fetches the pinned ones)")
    _check(spark, parsed, write)
    skip = getattr(getattr(jvm, _EXECUTION + "CommandExecutionMode$"), "MODULE$").SKIP()
    analyzed = capture_sql_exception(
        lambda: session.sessionState().executePlan(parsed, skip).analyzed())()
    _check(spark, analyzed, write)
    return parsed


def _spark_read_describe_history(node: Any) -> str | None:
    """`DESCRIBE HISTORY` where Spark's own parser read it (no Delta): DESCRIBE of a column
    of a table named HISTORY."""
    if node.getClass().getName() != _LOGICAL + "DescribeColumn":
        return None
    relation = node.relation()
    name = relation.multipartIdentifier() if relation.getClass().getName() == \
        _ANALYSIS + "UnresolvedTableOrView" else None
    if name is None or name.size() != 1 or name.apply(0).upper() != "HISTORY":
        return None
    return "DESCRIBE HISTORY"


def _check(spark: SparkSession, plan: Any, write: bool) -> None:
    jvm: Any = spark._jvm
    subquery = jvm.java.lang.Class.forName(_EXPRESSIONS + "SubqueryExpression")
    for kind, node in _nodes(plan, subquery):
        name = node.getClass().getName()
        simple = name.rsplit(".", 1)[-1]
        if name in NEVER:
            raise RefusedStatement(f"[{ERROR_CLASS}] refused: {NEVER[name]}")
        if name in CALL_OUTS or (kind == "expression" and any(
                word in simple for word in _USER_FUNCTION_WORDS)):
            reason = CALL_OUTS.get(name, f"{simple} runs user code")
            raise RefusedStatement(f"[{ERROR_CLASS}] refused: {reason}")
        if kind != "plan" or name in QUERY_OPERATORS or (write and name in WRITE_OPERATORS):
            if name == _VACUUM and (node.inventoryTable().isDefined()
                                    or node.inventoryQuery().isDefined()):
                raise RefusedStatement(f"[{ERROR_CLASS}] refused: --write runs VACUUM over the "
                                       "table's own files, not over an inventory")
            continue
        what = STATEMENTS.get(name, simple)
        if write:
            raise RefusedStatement(
                f"[{ERROR_CLASS}] refused: --write runs queries and {WRITES} by its name, "
                f"and {what} is not one (operator {simple})")
        raise RefusedStatement(
            f"[{ERROR_CLASS}] refused: sharestate sql runs queries only, and {what} is not "
            f"one (operator {simple}); to change tables, see --write")


def _nodes(plan: Any, subquery: Any) -> Iterator[tuple[str, Any]]:
    """Every plan operator and expression of `plan`, subquery plans included."""
    plans = [plan]
    while plans:
        node = plans.pop()
        yield "plan", node
        plans.extend(_seq(node.children()) + _seq(node.innerChildren()))
        expressions = _seq(node.expressions())
        while expressions:
            expression = expressions.pop()
            yield "expression", expression
            if subquery.isInstance(expression):
                plans.append(expression.plan())
            expressions.extend(_seq(expression.children()))


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]
