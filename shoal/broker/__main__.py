"""`python -m broker` runs the broker (same as the `shoal-broker` script)."""

import sys

from shoal.broker.cli import main

sys.exit(main())
