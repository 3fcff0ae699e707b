"""python -m bench.server {coordinator,floor} --port P [--hosts-file F]

One benchmark server process. The coordinator runs through its own `python -m coordinator serve`
entry point (coordinator.__main__.main), so what is measured is exactly what ships; this wrapper
only raises the soft fd limit and, for fleets too large for one environment string (Linux caps
each at 128 KiB), sets COORDINATOR_STATIC_HOSTS from a file before the settings are read.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.system import raise_nofile


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.server")
    parser.add_argument("kind", choices=["coordinator", "floor"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts-file", type=Path)
    args = parser.parse_args()
    raise_nofile()
    if args.hosts_file is not None:
        os.environ["COORDINATOR_STATIC_HOSTS"] = args.hosts_file.read_text()
    if args.kind == "floor":
        from bench.floor_app import serve

        serve(args.port)
        return 0
    from coordinator.__main__ import main as coordinator_main

    return coordinator_main(["serve", "--host", "127.0.0.1", "--port", str(args.port)])


if __name__ == "__main__":
    sys.exit(main())
