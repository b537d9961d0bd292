"""A packet-level delay line between two TUN devices: netem's delay, jitter and loss in user space.

Used by :mod:`rejoinder.hosting.network` where the kernel has no ``sch_netem`` (the qdisc ``tc
netem`` needs). Every IP packet read from one TUN device is written to the other after
``delay_ms`` ± ``jitter_ms`` (normal, clipped at 0), or dropped with probability ``loss_pct`` %.
The jitter is drawn once per burst: packets leaving within ``burst_ms`` of the previous one
share its delay, as back-to-back packets do on a real path (netem's uncorrelated per-packet
jitter makes a message split over two packets wait for the later of two draws, adding about
0.56 σ per direction). Bursts further apart may be reordered. Real kernel TCP runs on both ends,
so loss and reordering cost real retransmissions.

One thread, ``select`` with microsecond timeouts: the delay is kept to within the scheduler's
wake-up latency (tens of µs on an idle core). Run as a process:
``python -m rejoinder.hosting.delayline --a NAME --b NAME --delay-ms D --jitter-ms J --loss-pct L``;
it creates both devices, raises itself to real-time priority (:func:`realtime`), prints ``ready``,
and relays until SIGTERM; the devices vanish with it.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import select
import signal
import struct
import sys
import time
import heapq
import itertools

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name: str) -> int:
    """Create TUN device ``name`` (no packet-info header); returns its non-blocking fd.

    Raises:
        OSError: no /dev/net/tun or no CAP_NET_ADMIN.
    """
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


class DelayLine:
    """Relays packets between fds ``a`` and ``b`` with one-way ``delay_ms``, ``jitter_ms`` (σ of
    a normal) and ``loss_pct`` per direction."""

    def __init__(self, a: int, b: int, delay_ms: float, jitter_ms: float = 0.0, loss_pct: float = 0.0,
                 seed: int = 0, burst_ms: float = 1.0) -> None:
        self.fds = (a, b)
        self.delay = delay_ms / 1000.0
        self.jitter = jitter_ms / 1000.0
        self.loss = loss_pct / 100.0
        self.rng = random.Random(seed)
        self.queues: dict[int, list] = {a: [], b: []}  # heaps of (due, seq, packet) by destination
        self.seq = itertools.count()
        self.burst = burst_ms / 1000.0
        self.last = {a: (-1.0, 0.0), b: (-1.0, 0.0)}  # per destination: (last packet time, its jitter)
        self.passed = 0
        self.dropped = 0
        self.running = True

    def _schedule(self, dst: int, packet: bytes, now: float) -> None:
        if self.loss and self.rng.random() < self.loss:
            self.dropped += 1
            return
        last_t, jitter = self.last[dst]
        if self.jitter and now - last_t > self.burst:
            jitter = self.rng.gauss(0.0, self.jitter)
        self.last[dst] = (now, jitter)
        delay = self.delay + jitter
        heapq.heappush(self.queues[dst], (now + max(0.0, delay), next(self.seq), packet))

    def run(self) -> None:
        a, b = self.fds
        other = {a: b, b: a}
        while self.running:
            now = time.monotonic()
            nxt = None
            for dst, q in self.queues.items():
                while q and q[0][0] <= now:
                    try:
                        os.write(dst, heapq.heappop(q)[2])
                        self.passed += 1
                    except OSError:  # device gone or buffer full: the packet is lost
                        self.dropped += 1
                if q:
                    nxt = q[0][0] if nxt is None else min(nxt, q[0][0])
            timeout = None if nxt is None else max(0.0, nxt - time.monotonic())
            try:
                ready, _, _ = select.select([a, b], [], [], timeout)
            except InterruptedError:
                continue
            now = time.monotonic()
            for src in ready:
                while True:
                    try:
                        packet = os.read(src, 65535)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        self.running = False
                        break
                    self._schedule(other[src], packet, now)


def realtime() -> str:
    """Run this process at real-time priority (SCHED_FIFO), as the kernel's netem runs in softirq
    context, above any user process: on a loaded machine a normal-priority delay line would add
    its scheduling wait to every packet. Falls back to nice -20; returns what it got."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
        return "SCHED_FIFO 50"
    except (AttributeError, OSError):
        try:
            os.nice(-20)
            return "nice -20"
        except OSError:
            return "normal"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay per direction")
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--loss-pct", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    fa, fb = open_tun(args.a), open_tun(args.b)
    line = DelayLine(fa, fb, args.delay_ms, args.jitter_ms, args.loss_pct, args.seed)

    def stop(*_):  # select() is retried after a handler returns (PEP 475): leave by raising
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.stdout.write(f"ready {realtime()}\n")
    sys.stdout.flush()
    try:
        line.run()
    finally:
        sys.stdout.write(f"passed {line.passed} dropped {line.dropped}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
