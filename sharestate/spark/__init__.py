"""Spark over the core: the session (settings, Delta, the class archive), the live-cluster
data source, and the jobs (`jobs/`: one module per job, each only planning and writing; the
per-row work runs on executors in `sharestate.tables`). `run.py` runs jobs in order for
`spark-submit pipelines/*.py` and `sharestate run`; `quality_job.py` is the quality gate.
"""
