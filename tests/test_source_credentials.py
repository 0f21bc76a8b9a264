"""A user name and password in a cluster's URL (`kafka://user:secret@host:port`) never show:
not in `run`'s or `serve`'s error line, not in a log line (librdkafka's own included: the
URL is refused before a client is made), not in a table (nothing starts). Each command exits
2 with one line that shows the URL as `kafka://***@host:port` and says where credentials go.
The same for an offline command given the URL, and for the Spark pipeline's own entry point.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from serve_support import mock_cluster

from sharestate.app.cli import main
from sharestate.cluster.kafka_options import redact_userinfo
from sharestate.exit_codes import USAGE
from sharestate.spark.run import main as pipeline_main

SECRET = "s3cret-in-the-url"


def one_line(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    """The one line the command printed; nothing anywhere holds the secret."""
    out, err = capfd.readouterr()
    assert SECRET not in out + err + caplog.text
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_run_and_serve_refuse_user_info_in_the_url_without_showing_it(
        tmp_path: Path, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    cluster = mock_cluster()
    capfd.readouterr()
    host = cluster.bootstrap
    url = f"kafka://sharestate:{SECRET}@{host}"
    said = (f"sharestate: error: ***@{host}: a Kafka server is HOST:PORT, with no user name or "
            f"password: give the user as kafka.sasl.username (--kafka-option "
            f"sasl.username=NAME) and the password in SHARESTATE_KAFKA_SASL_PASSWORD")
    assert main(["serve", "--source", url, "--listen", "127.0.0.1:0"]) == USAGE
    assert one_line(capfd, caplog) == said
    warehouse = tmp_path / "warehouse"
    assert main(["run", "--source", url, "--warehouse", str(warehouse)]) == USAGE
    assert one_line(capfd, caplog) == said
    assert not warehouse.exists()
    for jobs in (("ingest",), ("analytics",)):  # spark-submit pipelines/<job>.py
        assert pipeline_main(["--source", url, "--warehouse", str(warehouse)], jobs) == USAGE
        assert one_line(capfd, caplog) == said, jobs
    assert not warehouse.exists()


def test_other_commands_show_a_url_without_its_user_info(
        capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    for argv, said in [
            (["state", f"kafka://u:{SECRET}@127.0.0.1:9092"],
             "argument source: kafka://***@127.0.0.1:9092 is a live cluster"),
            (["decode", f"s3://key:{SECRET}@bucket/logs"],
             "argument source: s3://***@bucket/logs: decode, state, prune and offsets read"),
            (["serve", "--source", f"http://u:{SECRET}@127.0.0.1:9092"],
             "argument --source: must be kafka://HOST:PORT[,...], not "
             "'http://***@127.0.0.1:9092'")]:
        assert main(argv) == USAGE
        out, err = capfd.readouterr()
        assert SECRET not in out + err + caplog.text
        assert said in err.strip().splitlines()[-1], err


@pytest.mark.parametrize(("text", "shown"), [
    ("kafka://u:p@h:1", "kafka://***@h:1"),
    ("cannot reach the cluster at u:p@h:1,h2:2 within 1 s", "cannot reach the cluster at "
                                                            "***@h:1,h2:2 within 1 s"),
    ("kafka://u:p@ss@h:1", "kafka://***@h:1"),  # an @ in the password
    ("['kafka://a:b@h1,c:d@h2', 'kafka://x@y']", "['kafka://***@h1,***@h2', 'kafka://***@y']"),
    ("kafka://h:9092,h2:9092", "kafka://h:9092,h2:9092"),
    ("not 'http://u:p/q@h'", "not 'http://***@h'"),
])
def test_redact_userinfo(text: str, shown: str) -> None:
    assert redact_userinfo(text) == shown


def test_a_user_without_a_password_is_told_where_the_password_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("SHARESTATE_KAFKA_SASL_PASSWORD", raising=False)
    cluster = mock_cluster()
    capfd.readouterr()
    user = ["--kafka-option", "sasl.mechanism=PLAIN", "--kafka-option", "sasl.username=u"]
    said = ("sharestate: error: option kafka.sasl.username has no password: give it in "
            "SHARESTATE_KAFKA_SASL_PASSWORD")
    source = f"kafka://{cluster.bootstrap}"
    warehouse = tmp_path / "warehouse"
    assert main(["run", "--source", source, *user, "--warehouse", str(warehouse)]) == USAGE
    assert one_line(capfd, caplog) == said
    assert main(["serve", "--source", source, *user, "--listen", "127.0.0.1:0"]) == USAGE
    assert one_line(capfd, caplog) == said
    assert not warehouse.exists()
