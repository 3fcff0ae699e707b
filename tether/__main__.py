"""``python -m tether``: the ``tether`` command."""

from __future__ import annotations

import sys

from tether.cli import main

sys.exit(main())
