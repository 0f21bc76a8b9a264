"""`spark-submit pipelines/replay.py --warehouse DIR ...`: the replay job alone."""

import sys

from pipelines.run_all import main

if __name__ == "__main__":
    sys.exit(main(jobs=("replay",)))
