"""Worker processes for `serve` (``WEB_CONCURRENCY``): the listening socket is bound once, in a
parent that forks the workers, forwards SIGTERM and SIGINT to them and replaces any that dies
(`Supervisor`). The parent holds no event loop, thread or Redis connection; each worker builds its
own app and serves with `coordinator.server`.
"""

from __future__ import annotations

import functools
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from uvicorn.config import STARTUP_FAILURE

from coordinator.server import GRACEFUL_TIMEOUT_S

log = logging.getLogger("coordinator")


# A worker that dies sooner than this after its start is crash-looping: each start of its slot is
# then delayed twice as long as the one before, from RESTART_MIN_S up to RESTART_MAX_S.
STABLE_S = 10.0
RESTART_MIN_S = 0.25
RESTART_MAX_S = 15.0
# Workers still running this long after the supervisor forwarded SIGTERM are killed.
STOP_TIMEOUT_S = GRACEFUL_TIMEOUT_S + 5
_BACKLOG = 2048  # uvicorn's default
_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
_SIGNALS = _STOP_SIGNALS | {signal.SIGCHLD}


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``, bound as uvicorn would bind it."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def run_workers(count: int, serve: Callable[[socket.socket], int], *, host: str, port: int) -> int:
    """Serve with ``count`` worker processes, each running ``serve(sock)`` on one listening
    socket, until SIGTERM or SIGINT (see `Supervisor`); the exit status.

    The socket is bound here, before any worker exists: every worker accepts on it (the kernel
    gives each connection to one of them), replacements inherit it, and a port already taken
    fails the start once instead of in every worker.
    """
    try:
        sock = listen(host, port)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", host, port, exc)
        return STARTUP_FAILURE
    with sock:
        log.info("serving on %s:%d with %d worker processes", host, sock.getsockname()[1], count)
        return Supervisor(count, functools.partial(serve, sock)).run()


class _SignalPipe:
    """Signals as bytes on a pipe (``signal.set_wakeup_fd``), so the supervisor waits for them in
    ``select`` with a timeout, and no code of ours runs inside a signal handler."""

    def __init__(self, signals: frozenset[signal.Signals]) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        # The wake-up byte is written by Python's C-level handler, installed only for signals
        # that have a Python handler: a no-op one.
        self._original = {sig: signal.signal(sig, _ignore) for sig in signals}
        self._previous_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)

    def wait(self, timeout: float | None) -> list[int]:
        """The signals that arrived, waiting up to ``timeout`` seconds (None: until one does)."""
        ready, _, _ = select.select([self._read_fd], [], [], timeout)
        if not ready:
            return []
        try:
            return list(os.read(self._read_fd, 4096))
        except BlockingIOError:
            return []

    def close(self) -> None:
        """Undo it all: in the supervisor as it exits, and in each worker as it starts."""
        signal.set_wakeup_fd(self._previous_fd)
        for sig, handler in self._original.items():
            signal.signal(sig, handler)
        os.close(self._read_fd)
        os.close(self._write_fd)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A Python-level handler that does nothing: the byte on the wake-up pipe is the message."""


@dataclass
class _Slot:
    """One of the workers the supervisor keeps running."""

    pid: int | None = None
    started_at: float = 0.0
    crashes: int = 0  # deaths in a row, each within STABLE_S of its start
    start_at: float = 0.0  # when to start its next worker, once pid is None


class Supervisor:
    """Keeps ``count`` forked worker processes running ``work()``, and stops them on a signal.

    Fork, not uvicorn's ``Multiprocess``: that one spawns workers from a pickled ``Config``, which
    cannot hold our app nor the protocol class built per header timeout; it runs uvicorn's own
    ``Server`` (not ours, which answers waiting polls at the signal and exits 0); and it restarts
    a dying worker without any backoff. The supervisor holds no event loop, thread or Redis
    connection: each worker builds its own after the fork.

    - A worker that exits while not told to stop is replaced, logged; after a delay that doubles
      while its slot keeps dying young, so a crash loop does not spin.
    - A worker that fails to start (uvicorn's ``STARTUP_FAILURE``: Redis unreachable, ...) while
      no other worker runs stops the supervisor with that status: nothing is serving, and the
      platform's restart policy takes over, as with one process.
    - SIGTERM or SIGINT: SIGTERM to every worker (each answers its waiting polls at once and
      drains), and exit 0 once all exited 0; 1 if any did not, or had to be killed after
      ``STOP_TIMEOUT_S``.
    """

    def __init__(self, count: int, work: Callable[[], int]) -> None:
        self._work = work
        self._slots = [_Slot() for _ in range(count)]
        self._stopping = False
        self._kill_at: float | None = None
        self._status = 0
        self._signals: _SignalPipe | None = None

    def run(self) -> int:
        """Start the workers and supervise them until they have all exited; the exit status."""
        self._signals = _SignalPipe(_SIGNALS)
        try:
            for slot in self._slots:
                self._start(slot)
            while not self._stopping or self._running():
                for signum in self._signals.wait(self._timeout()):
                    if signum in _STOP_SIGNALS:
                        self._stop(f"{signal.Signals(signum).name} received")
                self._reap()
                self._act_on_time()
        finally:
            self._signals.close()
            for pid in self._running():  # the supervisor itself failed: leave no worker behind
                os.kill(pid, signal.SIGTERM)
        log.info("all workers exited; exit status %d", self._status)
        return self._status

    def _running(self) -> list[int]:
        return [slot.pid for slot in self._slots if slot.pid is not None]

    def _timeout(self) -> float | None:
        """Until the next thing to do that no signal announces: a restart, or the stop's end."""
        if self._stopping:
            deadline = self._kill_at
        else:
            deadline = min((slot.start_at for slot in self._slots if slot.pid is None), default=None)
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _act_on_time(self) -> None:
        now = time.monotonic()
        if not self._stopping:
            for slot in self._slots:
                if slot.pid is None and slot.start_at <= now:
                    self._start(slot)
        elif self._kill_at is not None and now >= self._kill_at:
            self._kill_at = None
            for pid in self._running():
                log.error("worker %d still running %g s after SIGTERM: killed", pid, STOP_TIMEOUT_S,
                          extra={"worker": pid})
                os.kill(pid, signal.SIGKILL)
            self._status = self._status or 1

    def _start(self, slot: _Slot) -> None:
        slot.pid = self._fork()
        slot.started_at = time.monotonic()
        log.info("worker %d started", slot.pid, extra={"worker": slot.pid})

    def _stop(self, reason: str) -> None:
        if self._stopping:
            return  # workers already have their SIGTERM; a second would not stop them sooner
        self._stopping = True
        self._kill_at = time.monotonic() + STOP_TIMEOUT_S
        running = self._running()
        log.info("%s: stopping %d workers", reason, len(running))
        for pid in running:
            os.kill(pid, signal.SIGTERM)  # not reaped yet, so the pid is still this worker's

    def _reap(self) -> None:
        while True:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = next((slot for slot in self._slots if slot.pid == pid), None)
            if slot is not None:
                slot.pid = None
                self._exited(slot, pid, os.waitstatus_to_exitcode(wait_status))

    def _exited(self, slot: _Slot, pid: int, code: int) -> None:
        now = time.monotonic()
        if self._stopping:
            # Killed by the SIGTERM itself: it came before the worker's server handled signals,
            # so the worker had served nothing yet.
            if code not in (0, -signal.SIGTERM):
                log.warning("worker %d %s while stopping", pid, _described(code), extra={"worker": pid})
                self._status = self._status or 1
            return
        if code == STARTUP_FAILURE and not self._running():
            log.error("worker %d failed to start, and no worker is running", pid, extra={"worker": pid})
            self._status = STARTUP_FAILURE
            self._stop("no worker can start")
            return
        lived = now - slot.started_at
        slot.crashes = min(slot.crashes + 1, 16) if lived < STABLE_S else 1
        delay = min(RESTART_MAX_S, RESTART_MIN_S * 2 ** (slot.crashes - 1))
        slot.start_at = now + delay
        log.warning("worker %d %s after %.1f s; replacing it in %.2f s", pid, _described(code), lived,
                    delay, extra={"worker": pid, "exit_code": code})

    def _fork(self) -> int:
        # Signals wait until the child has undone the supervisor's handlers: one arriving in
        # between would otherwise go to the no-op handler, and be lost.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        sys.stdout.flush()
        sys.stderr.flush()  # else the child would write the parent's buffered output again
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                status = self._worker(mask)
            finally:
                # Never return into the supervisor's stack (nor run its atexit handlers).
                os._exit(status)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return pid

    def _worker(self, mask: set[signal.Signals]) -> int:
        """In the forked child: undo the supervisor's signal set-up, then work; the exit status."""
        try:
            assert self._signals is not None
            self._signals.close()
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            return self._work()
        except SystemExit as exc:  # uvicorn exits this way when the app fails to start
            return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        except KeyboardInterrupt:  # Ctrl-C reached it before its server took over SIGINT
            return 0
        except BaseException:
            log.exception("worker %d failed", os.getpid())
            return 1
        finally:
            logging.shutdown()  # flush the handlers: os._exit will not


def _described(code: int) -> str:
    """An exit status as ``os.waitstatus_to_exitcode`` gives it, in words."""
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"
