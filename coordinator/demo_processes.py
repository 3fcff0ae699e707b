"""The demo's processes (``coordinator/demo.py``): each child started as a person would start it,
its log in a file, stopped by SIGTERM and then SIGKILL, and Ctrl-C or SIGTERM to the demo as a
request (``StopRequest``) acted on where the demo waits (that module's docstring says why)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

TIMEOUT_S = 60.0


class DemoError(Exception):
    """Something the demo cannot go on without; the message says what, in one line."""


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM, recorded by the signal handler and acted on by ``sleep`` and
    ``check``, which raise ``KeyboardInterrupt`` in the demo's own code only. A signal wakes a
    ``sleep`` at once (the wakeup fd: one arriving just before the sleep is not lost either)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self._reader, self._writer = socket.socketpair()
        for end in (self._reader, self._writer):
            end.setblocking(False)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.requested = True  # nothing more: this may run between any two bytecodes

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """The handlers in place (and the wakeup fd) while inside; the previous ones after."""
        previous = {signum: signal.signal(signum, self._on_signal) for signum in self.SIGNALS}
        previous_fd = signal.set_wakeup_fd(self._writer.fileno())
        try:
            yield self
        finally:
            signal.set_wakeup_fd(previous_fd)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._reader.close()
            self._writer.close()

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if a stop is requested meanwhile (then raise)."""
        self.check()
        select.select([self._reader], [], [], seconds)
        with contextlib.suppress(BlockingIOError):
            self._reader.recv(64)  # what the signals wrote: the next sleep waits again
        self.check()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(what: str, check: Callable[[], T | None], stop: StopRequest, timeout: float = TIMEOUT_S) -> T:
    deadline = time.monotonic() + timeout
    while (value := check()) is None:
        if time.monotonic() > deadline:
            raise DemoError(f"timed out waiting for {what}")
        stop.sleep(0.05)
    return value


class Process:
    """One child process; its output goes to ``<workdir>/<name>.log``."""

    def __init__(self, name: str, module: str, args: list[str], env: dict[str, str], workdir: Path) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        with open(self.log_path, "wb") as log:
            # A session of its own: a Ctrl-C at the terminal reaches the demo alone, which then
            # stops the agents before the coordinator, so their last reports are answered.
            self.popen = subprocess.Popen([sys.executable, "-m", module, *args], env=env, cwd=workdir,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def check_running(self) -> None:
        if self.popen.poll() is not None:
            raise DemoError(f"{self.name} exited with {self.popen.returncode}")

    def terminate(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def wait_stopped(self, deadline: float) -> int:
        """Wait for it to exit until ``deadline`` (monotonic), then SIGKILL it; the exit code."""
        try:
            self.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        return self.popen.returncode

    def log_tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(f"  {self.name}| {line}" for line in text)


def child_env(**settings: str) -> dict[str, str]:
    """This environment without any Tether setting (no REDIS_URL: the embedded Redis), plus
    ``settings``; the children import what this process imports."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COORDINATOR_", "HOST_AGENT_")) and k != "REDIS_URL"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.update(settings)
    return env


def stop_all(processes: list[Process], timeout: float = 15.0) -> bool:
    """The agents first, together (they finish or stop their work and report it), then the
    coordinator (``processes[0]``), each group SIGKILLed ``timeout`` after its SIGTERM."""
    clean = True
    for group in (processes[:0:-1], processes[:1]):
        for process in group:
            process.terminate()
        deadline = time.monotonic() + timeout
        for process in group:
            code = process.wait_stopped(deadline)
            if code != 0:
                clean = False
                print(f"tether demo: {process.name} exited with {code}; the end of its log:\n{process.log_tail()}",
                      file=sys.stderr)
    return clean
