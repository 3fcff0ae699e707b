"""python -m coordinator serve [--host H] [--port P] | demo"""

from __future__ import annotations

import argparse
import logging
import sys

from pydantic import ValidationError
from pydantic_settings import SettingsError

from coordinator.settings import Settings


def _serve(args: argparse.Namespace) -> int:
    try:
        settings = Settings()
    except ValidationError as exc:
        # One clear line, naming the settings at fault and never their values.
        fields = ", ".join(str(e["loc"][0]) for e in exc.errors())
        print(f"coordinator: invalid configuration: {fields}", file=sys.stderr)
        return 2
    except SettingsError as exc:  # a value that is not even parseable (bad JSON)
        print(f"coordinator: invalid configuration: {exc}", file=sys.stderr)
        return 2
    from coordinator.app import create_app
    from coordinator.server import raise_nofile, run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    raise_nofile()
    port = args.port if args.port is not None else settings.port
    app = create_app(settings)
    # Waiting polls and feed watchers are ended at the signal, instead of holding the stop.
    return run(app, host=args.host, port=port, header_timeout_s=settings.header_timeout_s,
               on_exit=app.state.stopping)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coordinator")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the coordinator")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=None, help="default: $PORT, else 8000")
    commands.add_parser("demo", help="coordinator + simulated hosts on the embedded Redis")
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    from coordinator.demo import run_demo

    return run_demo()


if __name__ == "__main__":
    sys.exit(main())
