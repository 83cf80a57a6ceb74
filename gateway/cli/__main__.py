"""`python -m gateway.cli`: the command line."""

import sys

from gateway.cli import main

sys.exit(main())
