"""Path arguments, resolved once where they enter (argument parsing): every layer below sees
an absolute path, so no component resolves one against a working directory of its own (GE's
Data Docs refuse relative ones, Spark's executors may run elsewhere). URIs stay as given.
"""

from __future__ import annotations

import os
import re

URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def location(text: str) -> str:
    """`text` as an absolute local path (`~` expanded), or unchanged when it is a URI
    (`kafka://host:9092`, `s3://bucket/path`) or `-` (standard output)."""
    if text == "-" or URI.match(text):
        return text
    return os.path.abspath(os.path.expanduser(text))
