"""`python -m sharestate`."""

import sys

from sharestate.cli import main

sys.exit(main())
