"""Spark's and Delta's errors as one line each: what `sharestate sql` and the jobs print, and
which of them is a full file system."""

from __future__ import annotations

import errno
import os
import re
from typing import Any

_CONDITION = re.compile(r"\[[A-Z][A-Z0-9_.]*\] ")
_RENDERING = "SparkThrowableHelper.getMessage"


def original_error(exc: BaseException) -> BaseException:
    """The error Spark or Delta raised, where PySpark failed to convert it.

    PySpark renders a Java error's message again from Spark's table of error conditions
    (`getMessage()`, and the log of an error with a query context, while converting it).
    That table holds none of Delta's conditions (they are in Delta's jar,
    `error/delta-error-classes.json`), so rendering one fails with `[INTERNAL_ERROR] Cannot
    find main error class 'DELTA_...'`, raised while the original error was handled: the
    original is that failure's context."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

    while (isinstance(exc, Py4JJavaError) and _RENDERING in str(exc.errmsg)
           and exc.__context__ is not None):
        exc = exc.__context__
    return exc


def spark_error_line(exc: BaseException) -> str:
    """A Spark (or Delta) error's first paragraph in one line, led by its error condition
    (else its class).

    The message is the exception's own (never rendered again, see `original_error`),
    without the plan Spark appends to an analysis error; Delta wraps its sentences over
    several lines, joined here."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    exc = original_error(exc)
    if isinstance(exc, Py4JJavaError):
        java: Any = exc.java_exception
        error_class = str(java.getClass().getName())
        message = str(java.getMessage() or "")
    elif isinstance(exc, PySparkException):
        error_class = exc.getCondition() or type(exc).__name__
        message = str(exc)  # without the JVM stack: spark.sql.pyspark.jvmStacktrace.enabled
    else:
        error_class, message = type(exc).__name__, str(exc)
    text = message.strip().split("\n\n", 1)[0].split(";\n", 1)[0]
    first = " ".join(text.split())
    return first if _CONDITION.match(first) else f"[{error_class}] {first}".strip()


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc` (or an error it was raised from or over) is a write that found its file
    system full or a quota used up: an OSError, or an error of Spark, a Python worker or
    delta-rs whose message carries the system's words for it."""
    words = [os.strerror(number) for number in _NO_SPACE]
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            return True
        if any(word in str(error) for word in words):
            return True
        error = error.__cause__ or error.__context__
    return False
