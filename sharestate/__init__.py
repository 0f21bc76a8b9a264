"""sharestate: Kafka share-group and consumer-group state, as of any offset or time.

The library's entry point is `sharestate.api` (Arrow tables; docs/api.md); the command line
is `sharestate` (`sharestate.app.cli`), the Spark jobs `sharestate.spark`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sharestate")
except PackageNotFoundError:  # a source tree on the path, not installed
    __version__ = "0+unknown"
