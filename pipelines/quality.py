"""`spark-submit pipelines/quality.py --warehouse DIR ...`: the data-quality gate alone."""

import sys

from sharestate.spark.quality_job import main

if __name__ == "__main__":
    sys.exit(main())
