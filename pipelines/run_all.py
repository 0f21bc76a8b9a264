"""`spark-submit pipelines/run_all.py --source DIR --warehouse DIR ...`: every job in order
(ingest, decode, replay, analytics); `--help` lists the arguments."""

import sys

from sharestate.spark.run import main

if __name__ == "__main__":
    sys.exit(main())
