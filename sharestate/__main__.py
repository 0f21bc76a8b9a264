"""`python -m sharestate`."""

import sys

from sharestate.app.cli import main

sys.exit(main())
