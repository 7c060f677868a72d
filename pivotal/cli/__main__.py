"""`python -m pivotal.cli` runs the same command line as `pivotal`."""

import sys

from pivotal.cli.main import main

sys.exit(main())
