"""`spark-submit pipelines/decode.py --warehouse DIR ...`: the decode job alone."""

import sys

from sharestate.spark.run import main

if __name__ == "__main__":
    sys.exit(main(jobs=("decode",)))
