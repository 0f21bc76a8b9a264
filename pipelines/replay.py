"""`spark-submit pipelines/replay.py --warehouse DIR ...`: the replay job alone."""

import sys

from sharestate.spark.run import main

if __name__ == "__main__":
    sys.exit(main(jobs=("replay",)))
