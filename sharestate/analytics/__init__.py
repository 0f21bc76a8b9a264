"""Pure analytics over replayed state: the rows of the gold tables (no Spark, no I/O).

- `context`: `StateContext` (state partition, as-of point), `live_states`, `in_flight`.
- `lag`: `share_group_lag` rows (`lag_rows`, `share_lag`, `topic_names`).
- `redelivery`: `redelivery` rows and the per-group delivery-count histogram.
- `audit`: `audit_findings` rows (`ShareAuditor`, `TransactionAuditor`, replay and
  cross-topic findings).
- `offsets`: `consumer_group_offsets` rows (`OffsetHistory`, an offset-event listener).

The `prune_recommendations` row comes from `sharestate.replay.prune`, the prune point's home.

Row dicts use exactly the column names of `schemas/tables/<table>.json`, in that order.
"""
