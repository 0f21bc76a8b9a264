"""`sharestate serve`: the shared core applied to a live cluster, answered over HTTP.

A tailer (`tailer`) reads every partition of `__share_group_state` and `__consumer_offsets`
with one confluent-kafka consumer and hands each partition's records to its replay
(`live_log`): the same `ShareReplay` / `GroupReplay` over the same `ArrowLog` decoding the
Spark replay tasks run, fed chunk by chunk. `state` answers from the replays under one lock
with the views of the offline commands; `http` serves them (OpenAPI in `openapi`) and
`metrics` exports them for Prometheus.
"""
