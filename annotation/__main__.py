"""`python -m annotation ...`: see `annotation/cli.py`."""

import sys

from annotation.cli import main

sys.exit(main())
