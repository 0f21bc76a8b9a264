"""The service's OpenAPI document, fuzzed: schemathesis (its command line, every phase and
every check) reads /openapi.json from a running `sharestate serve` over the mock cluster
holding a simulated workload, and calls every operation with the document's examples,
boundary and invalid queries, generated ones and the methods it does not list. Every answer
must be what the document says (status, content type, body) and none a server error; an
undeclared method must be 405 with an Allow header. (It found the standard library's 501
for methods the service did not define.)"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_support import eventually, get, mock_cluster, simulated

from sharestate.app.serve.partition import ReplayOptions
from sharestate.app.serve.service import Service, start
from sharestate.cluster import parse_options

SCHEMATHESIS = Path(sys.executable).parent / "st"
EXAMPLES = 100
"""Generated cases per operation (the whole run takes about 10 s here)."""


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    cluster = mock_cluster()
    records = simulated(Path(tmp_path_factory.mktemp("simulated")), 3000, seed=11)
    for (topic, partition), written in records.items():
        cluster.produce(topic, written, partition)
    options = parse_options({"bootstrap.servers": cluster.bootstrap, "timeoutMs": "10000"})
    running = start(options, ("127.0.0.1", 0), ReplayOptions(), retention_minutes=10080,
                    version="test")
    eventually(lambda: get(running.address, "/readyz")[0] == 200)
    yield running
    running.close()


@pytest.mark.slow
def test_every_answer_is_as_documented_and_none_a_server_error(service: Service,
                                                               tmp_path: Path) -> None:
    host, port = service.address
    assert get(service.address, "/v1/share-partitions")[1], "fuzz a service that holds state"
    run = subprocess.run(
        [str(SCHEMATHESIS), "run", f"http://{host}:{port}/openapi.json", "--checks", "all",
         "--phases", "examples,coverage,fuzzing", "--max-examples", str(EXAMPLES),
         "--request-timeout", "10", "--no-color"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "No issues found" in run.stdout, run.stdout[-3000:]
