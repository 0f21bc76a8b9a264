"""The pipeline's jobs, one module each: `ingest` -> `decode` -> `replay` -> `analytics`.

Idempotence: ingest and decode replace the (topic, partition, segment) partitions they
read; replay and analytics recompute their tables (replay from the log start, as Kafka's
loader does) and replace them, and the `audit_findings` partitions of the rules each job
owns (`sharestate.analytics.audit.RULES`). `warehouse.py` holds what they share.
"""
