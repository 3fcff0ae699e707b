"""python -m bench.hops [--pairs N] [TREE ...]: where an idle dispatch's time goes, hop by hop.

Runs ``bench.compare``'s probes (each TREE's build, default this checkout, and the dispatch floor
doing the contract's work, 4g) while tcpdump records the loopback, then times each hop of every
probe from the kernel's timestamps on its packets:

- A: the create's request arriving -> process A's call of the create script leaving;
- Redis, create: that call -> the wake-up reaching process B (the script runs, then B's pop);
- B, wake-up: the wake-up -> B's call of the claim script;
- Redis, claim: that call -> its reply;
- B, answer: the reply -> the assignment's answer leaving for the agent.

The packets say how long each process and Redis held the dispatch, with nothing added to the
code measured. Needs tcpdump (``apt-get install tcpdump``) and the right to capture (root).
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import uvloop

from bench.compare import REDIS_URL, probe_builds
from bench.procs import REPO

HOPS = ("A: request -> create script", "Redis: create script -> wake-up at B", "B: wake-up -> claim script",
        "Redis: claim script", "B: claim reply -> answer")
WINDOW_S = 0.05  # a probe's packets all come within this of its request


@dataclass(frozen=True)
class Packet:
    at: float
    source: int  # TCP ports
    destination: int
    payload: bytes  # its first bytes (tcpdump's snap length)


def read_pcap(path: Path) -> list[Packet]:
    """The TCP packets with a payload in a pcap file of the loopback (Ethernet framing, IPv4)."""
    data = path.read_bytes()
    nanos = struct.unpack("<I", data[:4])[0] == 0xA1B23C4D
    packets, offset = [], 24
    while offset + 16 <= len(data):
        seconds, fraction, captured, _ = struct.unpack("<IIII", data[offset:offset + 16])
        frame = data[offset + 16:offset + 16 + captured]
        offset += 16 + captured
        ip = frame[14:]
        if len(ip) < 20 or ip[9] != 6:  # not TCP
            continue
        ip_header = (ip[0] & 15) * 4
        tcp = ip[ip_header:]
        tcp_header = (tcp[12] >> 4) * 4
        length = struct.unpack(">H", ip[2:4])[0] - ip_header - tcp_header
        if length > 0:
            source, destination = struct.unpack(">HH", tcp[:4])
            packets.append(Packet(seconds + fraction / (1e9 if nanos else 1e6), source, destination,
                                  tcp[tcp_header:]))
    return packets


def _is_script_call(packet: Packet, redis_port: int) -> bool:
    return packet.destination == redis_port and (b"FCALL" in packet.payload[:24] or b"EVALSHA" in packet.payload[:24])


def probe_hops(packets: list[Packet], creator: int, poller: int, redis_port: int) -> Iterator[list[float]]:
    """Each probe's hops (s) through the processes on ports ``creator`` and ``poller``."""
    for i, request in enumerate(packets):
        if request.destination != creator or not request.payload.startswith(b"POST /api/v1/tasks"):
            continue
        window = [p for p in packets[i + 1:i + 200] if p.at - request.at < WINDOW_S]
        create = next((p for p in window if _is_script_call(p, redis_port)), None)
        if create is None:
            continue
        wakeup = next((p for p in window if p.at >= create.at and p.source == redis_port and b"inbox" in p.payload), None)
        if wakeup is None:
            continue
        claim = next((p for p in window if p.at >= wakeup.at and _is_script_call(p, redis_port)
                      and p.source not in (create.source, wakeup.destination)), None)
        if claim is None:
            continue
        reply = next((p for p in window if p.at >= claim.at and p.source == redis_port
                      and p.destination == claim.source), None)
        if reply is None:
            continue
        answer = [p for p in window if p.at >= reply.at and p.source == poller]
        if not answer or not answer[0].payload.startswith(b"HTTP/1.1 200"):
            continue
        # a head and its body may leave in two writes: the answer is out with the last
        body = [p for p in answer[1:2] if p.destination == answer[0].destination and not p.payload.startswith(b"HTTP/")]
        end = (body or answer)[0]
        yield [create.at - request.at, wakeup.at - create.at, claim.at - wakeup.at, reply.at - claim.at,
               end.at - reply.at]


def capture(path: Path) -> subprocess.Popen[bytes]:
    """tcpdump writing the loopback's TCP packets that carry a payload to ``path``, listening."""
    dump = subprocess.Popen(["tcpdump", "-i", "lo", "-w", str(path), "-s", "256", "-U", "tcp and len > 66"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert dump.stderr is not None
    line = dump.stderr.readline()
    if b"listening" not in line:
        dump.kill()
        raise SystemExit(f"tcpdump did not start (it needs root): {line.decode().strip()}")
    return dump


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="*", type=Path, default=[REPO], help="checkouts of this repository")
    parser.add_argument("--pairs", type=int, default=500, help="probes of each build (default 500)")
    args = parser.parse_args()
    redis_port = urlsplit(REDIS_URL).port or 6379
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "dispatch.pcap"
        os.chmod(folder, 0o777)  # tcpdump may drop to its own user before writing
        dump = capture(path)
        try:
            probed = uvloop.run(probe_builds([tree.resolve() for tree in args.trees], args.pairs))
        finally:
            time.sleep(0.2)  # the last packets reach the file
            dump.terminate()
            dump.wait()
        packets = read_pcap(path)
    hops = {name: list(probe_hops(packets, creator, poller, redis_port))
            for name, (creator, poller) in probed.ports.items()}
    names = list(hops)
    print(f"{'median ms':38s}" + "".join(f"{name[-22:]:>24s}" for name in names))
    for n, hop in enumerate([*HOPS, "total"]):
        cells = [statistics.median(sum(h) if hop == "total" else h[n] for h in hops[name]) * 1000
                 if hops[name] else float("nan") for name in names]
        print(f"{hop:38s}" + "".join(f"{cell:24.3f}" for cell in cells))
    print(f"{'probes timed':38s}" + "".join(f"{len(hops[name]):24d}" for name in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
