"""What the machine says, read from the kernel: the fd limit, a free loopback port, and the CPU
and memory of processes (from /proc, so the figures are those of the real processes, not of
anything they report about themselves). The bottom floor of bench/: it imports nothing from it.
"""

from __future__ import annotations

import os
import resource
import socket
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A loopback TCP port nobody listens on (free when asked: bind it soon)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raise_nofile() -> None:
    """Soft fd limit up to the hard one: 10,000 polls are 10,000 sockets on each side."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat (fields 14 and 15)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle (kernel and interrupts included), from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / CLK_TCK


class CpuWindow:
    """CPU used by some processes between start() and stop(), in cores (1.0 = one core), and by
    the whole machine ("machine", out of os.cpu_count() cores) to show when it is saturated."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._t0 = 0.0
        self._cpu0: dict[str, float] = {}
        self._machine0 = 0.0

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._cpu0 = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self._machine0 = machine_busy_seconds()

    def stop(self) -> dict[str, float]:
        elapsed = time.monotonic() - self._t0
        cpu = {name: (cpu_seconds(pid) - self._cpu0[name]) / elapsed for name, pid in self.pids.items()}
        cpu["machine"] = (machine_busy_seconds() - self._machine0) / elapsed
        return cpu
