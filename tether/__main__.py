"""``python -m tether``: the ``tether`` command."""

import sys

from tether.cli import main

sys.exit(main())
