"""`python bench/run.py` does what `python -m bench` does."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
