"""`spark-submit pipelines/ingest.py --warehouse DIR ...`: the ingest job alone."""

import sys

from sharestate.spark.run import main

if __name__ == "__main__":
    sys.exit(main(jobs=("ingest",)))
