"""`spark-submit pipelines/analytics.py --warehouse DIR ...`: the analytics job alone."""

import sys

from pipelines.run_all import main

if __name__ == "__main__":
    sys.exit(main(jobs=("analytics",)))
