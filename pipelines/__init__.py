"""Entry scripts for `spark-submit pipelines/<job>.py`: thin, imported by nothing; the jobs
live in `sharestate.spark`."""
