"""`sharestate serve`: the shared core applied to a live cluster, answered over HTTP.

One writer, the tailer (`tailer`), reads every partition of `__share_group_state` and
`__consumer_offsets` with one confluent-kafka consumer and applies each partition's records
to its replay (`partition`: the same `ShareReplay` / `GroupReplay` the offline commands
run, over the batches the Spark replay task makes of a live read's rows), then publishes an
immutable view of them (`view`), swapped whole. Readers never touch the replays: `http`
answers every request from the view it took (OpenAPI in `openapi`), `metrics` exports it for
Prometheus, and `checkpoint` writes the snapshots the writer takes of its state.
"""
