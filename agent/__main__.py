"""``python -m agent``: the host agent. Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT),
1 when start-up failed or the coordinator revoked this host, 2 for bad configuration."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from agent.app import agent_version, run_agent
from agent.identity import StartupError
from agent.settings import AgentSettings, ConfigError, load_settings
from agent.usage import description, settings_help

EXIT_STARTUP = 1
EXIT_CONFIG = 2


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """Only ``--help`` and ``--version``: the agent is configured by its environment. Both answer
    before any setting is read, so they work with no configuration at all."""
    parser = argparse.ArgumentParser(
        prog="python -m agent",
        description=description(),
        epilog=settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tether agent {agent_version()}")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    parse_arguments(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"tether agent: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return asyncio.run(_serve(settings))
    except ConfigError as exc:
        print(f"tether agent: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StartupError as exc:
        print(f"tether agent: start-up failed: {exc}", file=sys.stderr)
        return EXIT_STARTUP


async def _serve(settings: AgentSettings) -> int:
    shutdown = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if shutdown.is_set():
            logging.getLogger("agent").info("%s again: already shutting down", signal.Signals(signum).name)
            return
        logging.getLogger("agent").info("%s: shutting down", signal.Signals(signum).name)
        shutdown.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    return await run_agent(settings, shutdown)


if __name__ == "__main__":
    sys.exit(main())
