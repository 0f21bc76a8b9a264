"""Options of the live Kafka source, and the credentials among them kept out of sight.

Options (names are case-insensitive, as Spark passes them):

- `bootstrap.servers` (or `kafka.bootstrap.servers`): required.
- `topics`: comma-separated; default both internal topics.
- `startingOffsets`: `earliest` (default) or JSON `{"topic": {"0": 1000, "1": -2}}`;
  `endingOffsets`: `latest` (default) or JSON. -2 means earliest, -1 latest; partitions the
  JSON leaves out take the default. Ranges are half-open: `[start, end)`.
- `maxOffsetsPerSplit`: at most this many offsets per Spark partition (default 500000).
- `timeoutMs`: how long a request to the cluster may take, and how long reading a range
  may go without receiving anything (default 60000).
- `kafka.<property>`: any librdkafka consumer property, e.g. `kafka.security.protocol`,
  `kafka.sasl.mechanism`, `kafka.sasl.username`, `kafka.ssl.ca.location`,
  `kafka.isolation.level` (default `read_committed`, Kafka's committed view: records of
  aborted transactions are not read, nor those of a transaction still open until it ends;
  `read_uncommitted` reads every data record, and a consumer, which sees no transaction
  markers, then takes a transactional offset commit for a plain one). Offsets are never
  committed.

A server is `HOST:PORT`: a user name or password in it (`kafka://user:secret@host:9092`, a
URL's user info) is refused, redacted, before anything reads it (librdkafka would log it
while failing to resolve it): the user goes in `kafka.sasl.username`, the password in the
environment. `redact_userinfo` is how any text that may hold such a URL is shown.

Credentials — the properties in `SENSITIVE` — come from `kafka.<property>` options or from
environment variables `SHARESTATE_KAFKA_<PROPERTY>` (dots as underscores, upper case, e.g.
`SHARESTATE_KAFKA_SASL_PASSWORD`), read where Spark plans the query. They are held as
`Secret`s, whose repr is `***`, and `KafkaReadOptions.redact` removes their values from any
text that leaves this package (exception messages, logs, run metadata).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sharestate.log.discovery import INTERNAL_TOPICS
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC

SENSITIVE = frozenset({
    "sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config",
})
KAFKA_SCHEME = "kafka://"
"""How a live cluster is named where a source is expected: `kafka://host:port[,host:port]`."""
ENV_PREFIX = "SHARESTATE_KAFKA_"
REDACTED = "***"
DEFAULT_MAX_OFFSETS_PER_SPLIT = 500_000
DEFAULT_TIMEOUT_MS = 60_000
DEFAULT_ISOLATION = "read_committed"
"""What Kafka answers: aborted and still-open transactions' records (transactional offset
commits in `__consumer_offsets`) are not offsets a group has (see the module docstring)."""
_SEPARATORS = r"""\s,;'"=(\[\]"""
USERINFO = re.compile(rf"(?P<before>[A-Za-z][A-Za-z0-9+.-]*://|(?<![^{_SEPARATORS}]))"
                      rf"[^{_SEPARATORS}@]+@(?:[^{_SEPARATORS}@]*@)*")
"""The user info of a URL (`kafka://user:secret@host`) or of a server (`user:secret@host`):
what lies before the host's last `@`, from the scheme or a separator on."""
FORCED = {"enable.auto.commit": "false", "enable.auto.offset.store": "false"}
"""Consumer properties the source fixes: it never commits offsets."""


def redact_userinfo(text: str) -> str:
    """`text` with the user info of every URL or server in it shown as `***`
    (`kafka://user:secret@host:9092` -> `kafka://***@host:9092`)."""
    return USERINFO.sub(rf"\g<before>{REDACTED}@", text)


def source_options(uri: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The reader options of a `kafka://host:port` source with client settings `extra`:
    both internal topics, each setting as `kafka.<property>`."""
    return {"bootstrap.servers": uri[len(KAFKA_SCHEME):],
            "topics": f"{SHARE_STATE_TOPIC},{CONSUMER_OFFSETS_TOPIC}",
            **{f"kafka.{k}": v for k, v in extra.items()}}


def env_name(prop: str) -> str:
    """The environment variable that may hold the librdkafka property `prop`."""
    return ENV_PREFIX + prop.upper().replace(".", "_")


class Secret:
    """A credential: `str`, `repr` and formatting show `***`; `reveal()` gives the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The value, for handing to a client's configuration only."""
        return self._value

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __getstate__(self) -> str:
        return self._value

    def __setstate__(self, state: str) -> None:
        self._value = state


class KafkaOptionError(ValueError):
    """An option the source cannot use."""


@dataclass(frozen=True)
class KafkaReadOptions:
    """Parsed options of one read (see the module docstring)."""

    bootstrap_servers: str
    topics: tuple[str, ...] = INTERNAL_TOPICS
    client: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, Secret] = field(default_factory=dict)
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    max_offsets_per_split: int = DEFAULT_MAX_OFFSETS_PER_SPLIT
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    @property
    def isolation_level(self) -> str:
        """`read_committed` (default) or `read_uncommitted`."""
        return self.client.get("isolation.level", DEFAULT_ISOLATION)

    def client_config(self, group_id: str) -> dict[str, str]:
        """The librdkafka configuration of a consumer, credentials included."""
        return {"bootstrap.servers": self.bootstrap_servers, "group.id": group_id,
                "isolation.level": self.isolation_level, **self.client, **FORCED,
                **{key: secret.reveal() for key, secret in self.secrets.items()}}

    def redact(self, text: str) -> str:
        """`text` with every credential value, and the user info of any URL or server
        (`redact_userinfo`), replaced by `***`."""
        for secret in self.secrets.values():
            if secret.reveal():
                text = text.replace(secret.reveal(), REDACTED)
        return redact_userinfo(text)

    def describe(self) -> dict[str, object]:
        """What was asked for, credentials shown as `***` (for logs and run metadata)."""
        return {"bootstrap.servers": self.redact(self.bootstrap_servers),
                "topics": list(self.topics),
                "client": {k: self.redact(v) for k, v in sorted(self.client.items())},
                "credentials": {k: REDACTED for k in sorted(self.secrets)},
                "startingOffsets": self.redact(self.starting_offsets),
                "endingOffsets": self.redact(self.ending_offsets)}

    def __repr__(self) -> str:
        return f"KafkaReadOptions({self.describe()!r})"


def _positive_int(options: Mapping[str, str], name: str, default: int) -> int:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise KafkaOptionError(f"option {name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise KafkaOptionError(f"option {name} must be positive, got {value}")
    return value


def parse_options(options: Mapping[str, str],
                  env: Mapping[str, str] | None = None) -> KafkaReadOptions:
    """Parse Spark reader options (credentials also from `env`, default `os.environ`)."""
    env = os.environ if env is None else env
    lowered = {key.lower(): value for key, value in options.items()}
    client: dict[str, str] = {}
    secrets: dict[str, Secret] = {}
    for key, value in lowered.items():
        if not key.startswith("kafka."):
            continue
        prop = key.removeprefix("kafka.")
        if prop in SENSITIVE:
            secrets[prop] = Secret(value)
        elif prop in FORCED and value.lower() != FORCED[prop]:
            raise KafkaOptionError(f"option {key} cannot be changed: the source never "
                                   f"commits offsets")
        elif prop != "bootstrap.servers":
            client[prop] = value
    for prop in SENSITIVE - set(secrets):
        if from_env := env.get(env_name(prop)):
            secrets[prop] = Secret(from_env)
    bootstrap = lowered.get("bootstrap.servers") or lowered.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise KafkaOptionError("option bootstrap.servers is required")
    if "@" in bootstrap:
        raise KafkaOptionError(
            f"{redact_userinfo(bootstrap)}: a Kafka server is HOST:PORT, with no user name or "
            f"password: give the user as kafka.sasl.username (--kafka-option "
            f"sasl.username=NAME) and the password in {env_name('sasl.password')}")
    if "sasl.username" in client and "sasl.password" not in secrets:
        raise KafkaOptionError(f"option kafka.sasl.username has no password: give it in "
                               f"{env_name('sasl.password')}")
    if client.get("isolation.level", DEFAULT_ISOLATION) not in ("read_uncommitted",
                                                                "read_committed"):
        raise KafkaOptionError("option kafka.isolation.level must be read_uncommitted or "
                               "read_committed")
    topics = tuple(t.strip() for t in lowered.get("topics", ",".join(INTERNAL_TOPICS))
                   .split(",") if t.strip())
    if not topics:
        raise KafkaOptionError("option topics names no topic")
    return KafkaReadOptions(
        bootstrap_servers=bootstrap, topics=topics, client=client, secrets=secrets,
        starting_offsets=lowered.get("startingoffsets", "earliest"),
        ending_offsets=lowered.get("endingoffsets", "latest"),
        max_offsets_per_split=_positive_int(lowered, "maxOffsetsPerSplit",
                                            DEFAULT_MAX_OFFSETS_PER_SPLIT),
        timeout_ms=_positive_int(lowered, "timeoutMs", DEFAULT_TIMEOUT_MS))
