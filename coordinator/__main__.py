"""python -m coordinator serve [--host H] [--port P] | demo [--keep]"""

from __future__ import annotations

import argparse
import logging
import re
import sys

from pydantic import ValidationError
from pydantic_settings import SettingsError

from coordinator.serve import usage
from coordinator.settings import MAX_PORT, Settings

log = logging.getLogger("coordinator")


def _settings() -> Settings | None:
    """The settings, or None once the problem is printed (never a value: it may be a secret)."""
    try:
        return Settings()
    except ValidationError as exc:
        # One clear line, naming the variables at fault and what is wrong, never their values.
        problems = "; ".join(f"{Settings.variable(str(e['loc'][0]))}: {_reason(e['msg'])}"
                             for e in exc.errors())
        print(f"coordinator: invalid configuration: {problems}", file=sys.stderr)
    except SettingsError as exc:  # a value that is not even parseable (bad JSON)
        print(f"coordinator: invalid configuration: {_unparseable(exc)}", file=sys.stderr)
    return None


def _unparseable(exc: SettingsError) -> str:
    """pydantic-settings says 'error parsing value for field "static_hosts" from source
    "EnvSettingsSource"': name the variable instead, and what JSON's parser said (a position,
    never the value)."""
    field = re.search(r'field "([^"]+)"', str(exc))
    if field is None:
        return str(exc)
    cause = exc.__cause__ or exc.__context__
    why = f"not valid JSON ({cause})" if isinstance(cause, ValueError) else "cannot be parsed"
    return f"{Settings.variable(field[1])}: {why}"


def _reason(message: str) -> str:
    """pydantic's message for a validator's ValueError, without its "Value error, " head."""
    return message.removeprefix("Value error, ")


def _worker_count(settings: Settings) -> int:
    """``WEB_CONCURRENCY``, unless the Redis is the embedded one, which lives inside a process:
    workers would each have their own, and share nothing."""
    if settings.web_concurrency > 1 and settings.redis_url is None:
        log.warning("WEB_CONCURRENCY=%d ignored: workers cannot share the embedded Redis; "
                    "running one process (set REDIS_URL to run several)", settings.web_concurrency)
        return 1
    return settings.web_concurrency


def _port_in_range(port: int | None) -> bool:
    """``--port`` outside 0..65535 is one line naming it (the socket layer would wrap it modulo
    65536 without a word, or refuse a negative one with an obscure errno)."""
    if port is None or 0 <= port <= MAX_PORT:
        return True
    print(f"coordinator: invalid configuration: --port: {port} is not a port (0..{MAX_PORT})", file=sys.stderr)
    return False


def _serve(args: argparse.Namespace) -> int:
    if not _port_in_range(args.port):
        return 2
    settings = _settings()
    if settings is None:
        return 2
    from uvicorn.config import STARTUP_FAILURE

    from coordinator.app import create_app
    from coordinator.serve.logs import configure_logging
    from coordinator.serve.preflight import Refused, check_redis, warn_about_settings
    from coordinator.serve.server import raise_nofile, run

    configure_logging(settings.log_format)
    try:
        # Once, before any worker: a refusal is one line, not one traceback per worker.
        check_redis(settings)
    except Refused as refused:
        log.error("%s", refused)
        return refused.exit_code
    warn_about_settings(settings, log)
    raise_nofile()
    port = args.port if args.port is not None else settings.port

    workers = _worker_count(settings)
    if workers > 1:
        from coordinator.serve.workers import run_workers

        # Nothing before this line left a connection open (check_redis closed its own), nor
        # started a loop or a thread: safe to fork. Each worker builds its own app.
        return run_workers(workers, lambda: create_app(settings), host=args.host, port=port,
                           header_timeout_s=settings.header_timeout_s,
                           graceful_timeout_s=settings.graceful_timeout_s)
    try:
        app = create_app(settings)
    except Exception:  # a REDIS_URL redis-py cannot parse, ...: as if the lifespan failed
        log.exception("cannot build the app")
        return STARTUP_FAILURE
    # Waiting polls and feed watchers are ended at the signal, instead of holding the stop.
    return run(app, host=args.host, port=port, header_timeout_s=settings.header_timeout_s,
               on_exit=app.state.stopping, graceful_timeout_s=settings.graceful_timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coordinator")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the coordinator", description=usage.description(),
                                epilog=usage.settings_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="default: $PORT, else 8000")
    demo = commands.add_parser("demo", help="coordinator + simulated hosts on the embedded Redis")
    demo.add_argument("--keep", action="store_true",
                      help="keep the fleet and the dashboard up after the summary, until Ctrl-C")
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    from coordinator.demo import run_demo

    return run_demo(keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
