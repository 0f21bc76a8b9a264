"""The OpenAPI 3.1 document of the service (`GET /openapi.json`)."""

from __future__ import annotations

from typing import Any

from sharestate.tables.spec import table

STATE_FIELDS = tuple(table("share_partition_state").names)
"""The fields of a `sharestate state` JSON line: the `share_partition_state` table's columns
(`sharestate.replay.rows.state_rows` builds both)."""

BUSY = {"description": "too many requests in progress: try again (after Retry-After seconds)"}
"""What every endpoint but the probes may answer under load (`sharestate.app.serve.http`)."""
GROUP = {"name": "group", "in": "query", "required": False,
         "description": "only this share or consumer group", "schema": {"type": "string"}}


def _rows(description: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    row: dict[str, Any] = {"type": "object"}
    if required:
        row["required"] = list(required)
    return {"description": description,
            "content": {"application/json": {"schema": {"type": "array", "items": row}}}}


def _get(summary: str, ok: dict[str, Any], *, group: bool = False,
         extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A GET operation; one without `extra` answers may also be 503 busy."""
    operation: dict[str, Any] = {"summary": summary,
                                 "responses": {"200": ok, **(extra or {"503": BUSY})}}
    if group:
        operation["parameters"] = [GROUP]
        operation["responses"]["400"] = {"description": "a query parameter it does not take"}
    return {"get": operation}


def document(version: str) -> dict[str, Any]:
    """The OpenAPI document of the endpoints `sharestate.app.serve.http` answers."""
    status = {"description": "status", "content": {"application/json": {"schema": {
        "type": "object"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "sharestate serve", "version": version,
                 "description": "Kafka share-group state and consumer-group offsets, replayed "
                                "live from __share_group_state and __consumer_offsets."},
        "paths": {
            "/healthz": _get("the process is up and its replays run", status,
                             extra={"503": {"description": "a replay or the reader failed"}}),
            "/readyz": _get("every record up to the end offsets seen at start is applied",
                            status, extra={"503": {"description": "still catching up"}}),
            "/v1/share-partitions": _get(
                "live share-partitions, fields as `sharestate state` JSON lines",
                _rows("share-partition states", STATE_FIELDS), group=True),
            "/v1/lag": _get("share_group_lag rows (end offsets from the cluster)",
                            _rows("lag rows"), group=True),
            "/v1/redelivery": _get("redelivery rows", _rows("redelivered ranges"), group=True),
            "/v1/prune": _get("prune_recommendations rows, one per state-topic partition",
                              _rows("prune recommendations")),
            "/v1/consumer-group-offsets": _get(
                "committed consumer-group offsets, as `sharestate offsets` rows",
                _rows("committed offsets"), group=True),
            "/v1/findings": _get("records that did not decode or apply",
                                 _rows("findings", ("kind", "message", "offset"))),
            "/v1/end-offsets": _get(
                "the data topics' end offsets read from the cluster so far, at the ends of "
                "each stretch two reads bracket (for a run's --end-offsets-from)",
                _rows("end offsets", ("topic", "topic_id", "partition", "time",
                                      "end_offset"))),
            "/metrics": {"get": {"summary": "Prometheus text exposition", "responses": {
                "200": {"description": "metrics",
                        "content": {"text/plain": {"schema": {"type": "string"}}}},
                "503": BUSY}}},
            "/openapi.json": _get("this document", status),
        },
    }
