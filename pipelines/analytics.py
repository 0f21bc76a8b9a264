"""`spark-submit pipelines/analytics.py --warehouse DIR ...`: the analytics job alone."""

import sys

from sharestate.spark.run import main

if __name__ == "__main__":
    sys.exit(main(jobs=("analytics",)))
