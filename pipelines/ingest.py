"""`spark-submit pipelines/ingest.py --warehouse DIR ...`: the ingest job alone."""

import sys

from pipelines.run_all import main

if __name__ == "__main__":
    sys.exit(main(jobs=("ingest",)))
