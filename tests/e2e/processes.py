"""Start real coordinator processes on loopback ports for end-to-end tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ADMIN, HOSTS, REAL_REDIS_URL


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def coordinator_env(prefix: str, **overrides: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COORDINATOR_", "HOST_AGENT_"))}
    env.update({
        "REDIS_URL": REAL_REDIS_URL,
        "COORDINATOR_KEY_PREFIX": prefix,
        "COORDINATOR_ADMIN_TOKEN": ADMIN,
        "COORDINATOR_STATIC_HOSTS": json.dumps(HOSTS),
        "COORDINATOR_REAPER_INTERVAL_S": "0.2",
    })
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"coordinator exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} not ready after {timeout}s")


@contextmanager
def coordinator_process(
    env: dict[str, str], log_path: Path | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A `python -m coordinator serve` process (run outside the checkout, so the installed
    package is what runs); yields its base URL and the process. Its output goes to `log_path`
    when given (for tests that read it), else to a temporary file."""
    port = free_port()
    log_file = open(log_path, "w+b") if log_path is not None else tempfile.TemporaryFile()
    with tempfile.TemporaryDirectory() as cwd, log_file as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process)
            yield url, process
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.seek(0)
            output = log.read().decode(errors="replace")
            if process.returncode not in (0, -15):
                print(output)
