"""Table specifications from `schemas/tables/*.json` (read by `sharestate.specs`), as Arrow
and Spark schemas. The jobs, the lake layer and the docs all read these files, so a table's
schema is written down exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from sharestate.specs import Spec, load, names

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class TableSpec(Spec):
    """One documented table."""

    def spark_schema(self) -> StructType:
        """The schema as Spark's StructType (built in Python, no JVM round trip)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        schema: StructType = from_arrow_schema(self.arrow_schema())
        return schema

    def ddl(self) -> str:
        """The schema as a Spark DDL string (`name type NOT NULL, ...`)."""
        return ", ".join(f"`{c.name}` {c.type}{'' if c.nullable else ' NOT NULL'}"
                         for c in self.columns)


@cache
def table(name: str) -> TableSpec:
    """The spec of table `name`."""
    return TableSpec(**vars(load("tables", name)))


@cache
def table_names() -> tuple[str, ...]:
    """Every documented table."""
    return names("tables")
