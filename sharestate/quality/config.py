"""Gate settings (`conf/quality.toml`) and decode-error acknowledgements.

`load_config()` reads the settings file — the argument, else `$SHARESTATE_QUALITY_CONF`,
else the repository's `conf/quality.toml` when there is one, else built-in defaults — and
the acknowledgement file it names. Both are TOML; their comments document every key.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from sharestate.arguments import read_file

Severity = Literal["error", "warning"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning")
CONF_ENV = "SHARESTATE_QUALITY_CONF"
DEFAULT_CONF = Path(__file__).resolve().parents[2] / "conf" / "quality.toml"
DEFAULT_STATES = (0, 2, 4)
"""AVAILABLE, ACKNOWLEDGED, ARCHIVED: what brokers persist."""
KAFKA_DELIVERY_COUNT_LIMIT = 5
"""group.share.delivery.count.limit's default."""


class ConfigError(ValueError):
    """An unreadable or invalid settings or acknowledgement file."""


@dataclass(frozen=True)
class Acknowledgement:
    """One accepted decode error (or kind of them); see conf/quality-acknowledgements.toml."""

    reason: str
    source: str | None = None
    offset: int | None = None
    position: int | None = None
    kind: str | None = None
    topic: str | None = None
    partition: int | None = None
    by: str | None = None
    until: dt.date | None = None

    def __post_init__(self) -> None:
        by_place = self.source is not None and (self.offset is not None
                                                or self.position is not None)
        if not by_place and self.kind is None:
            raise ConfigError(f"acknowledgement {self.label!r} needs source + offset "
                              "(or position), or kind")
        if not self.reason.strip():
            raise ConfigError(f"acknowledgement {self.label!r} needs a reason")

    @property
    def label(self) -> str:
        """The entry's keys as `name=value` pairs (how results refer to it)."""
        keys = ("source", "offset", "position", "kind", "topic", "partition")
        return " ".join(f"{k}={getattr(self, k)}" for k in keys
                        if getattr(self, k) is not None)

    def matches(self, row: Mapping[str, Any], today: dt.date) -> bool:
        """Whether this entry accepts the `decode_errors` row `row` on day `today`."""
        if self.until is not None and today > self.until:
            return False
        if self.source is not None and not fnmatch.fnmatchcase(str(row.get("source")),
                                                               self.source):
            return False
        return all(getattr(self, k) is None or getattr(self, k) == row.get(k)
                   for k in ("offset", "position", "kind", "topic", "partition"))


def acknowledged_by(row: Mapping[str, Any], acks: tuple[Acknowledgement, ...],
                    today: dt.date) -> str | None:
    """The label of the first entry that accepts `row`, else None."""
    return next((a.label + f" ({a.reason})" for a in acks if a.matches(row, today)), None)


@dataclass(frozen=True)
class QualityConfig:
    """What the gate checks against and when it fails."""

    fail_on: Severity = "error"
    delivery_count_limit: int = KAFKA_DELIVERY_COUNT_LIMIT
    delivery_states: Mapping[str, tuple[int, ...]] = field(
        default_factory=lambda: {"default": DEFAULT_STATES})
    acknowledgements: tuple[Acknowledgement, ...] = ()
    source: str | None = None
    """The settings file read, if any."""

    def states_for(self, dialect: str) -> tuple[int, ...]:
        return self.delivery_states.get(dialect, self.delivery_states.get("default",
                                                                          DEFAULT_STATES))

    def with_overrides(self, *, fail_on: str | None = None,
                       delivery_count_limit: int | None = None) -> QualityConfig:
        """This config with command-line overrides applied."""
        config = self
        if fail_on is not None:
            config = replace(config, fail_on=_severity(fail_on))
        if delivery_count_limit is not None:
            config = replace(config, delivery_count_limit=_limit(delivery_count_limit))
        return config


def config_path(path: str | Path | None = None) -> Path | None:
    """The settings file to read; one named explicitly must exist (and be a regular file,
    which reading it checks)."""
    named = path if path is not None else os.environ.get(CONF_ENV)
    if named:
        if not Path(named).exists():
            raise ConfigError(f"quality settings file not found: {named}")
        return Path(named)
    return DEFAULT_CONF if DEFAULT_CONF.is_file() else None


def load_config(path: str | Path | None = None, *,
                acknowledgements: str | Path | None = None) -> QualityConfig:
    """The gate settings from `path` (see `config_path`), acknowledgements included."""
    file = config_path(path)
    raw = _read_toml(file) if file else {}
    unknown = set(raw) - {"fail_on", "delivery_count_limit", "acknowledgements",
                          "delivery_states"}
    if unknown:
        raise ConfigError(f"{file}: unknown settings {sorted(unknown)}")
    states = {"default": DEFAULT_STATES}
    for dialect, values in raw.get("delivery_states", {}).items():
        if not isinstance(values, list) or not all(isinstance(v, int) and 0 <= v <= 4
                                                   for v in values):
            raise ConfigError(f"{file}: delivery_states.{dialect} must list states 0..4")
        states[str(dialect)] = tuple(sorted(set(values)))
    ack_file = acknowledgements or raw.get("acknowledgements")
    if ack_file is not None and acknowledgements is None and file is not None:
        ack_file = file.parent / str(ack_file)
    return QualityConfig(
        fail_on=_severity(raw.get("fail_on", "error")),
        delivery_count_limit=_limit(raw.get("delivery_count_limit",
                                            KAFKA_DELIVERY_COUNT_LIMIT)),
        delivery_states=states,
        acknowledgements=load_acknowledgements(ack_file) if ack_file else (),
        source=str(file) if file else None)


def load_acknowledgements(path: str | Path) -> tuple[Acknowledgement, ...]:
    """The `[[decode_error]]` entries of an acknowledgement file."""
    raw = _read_toml(Path(path))
    unknown = set(raw) - {"decode_error"}
    if unknown:
        raise ConfigError(f"{path}: unknown tables {sorted(unknown)}")
    acks = []
    for number, entry in enumerate(raw.get("decode_error", []), start=1):
        try:
            acks.append(Acknowledgement(**entry))
        except TypeError as exc:
            raise ConfigError(f"{path}: decode_error #{number}: {exc}") from None
        except ConfigError as exc:
            raise ConfigError(f"{path}: decode_error #{number}: {exc}") from None
    return tuple(acks)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(read_file(path).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def _severity(value: object) -> Severity:
    if value not in SEVERITIES:
        raise ConfigError(f"fail_on must be error or warning, not {value!r}")
    return value


def _limit(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"delivery_count_limit must be a positive integer, not {value!r}")
    return value
