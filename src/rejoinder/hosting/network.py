"""Network profiles: real delay, jitter and loss between the agent and its model servers.

A :class:`Link` creates a network namespace for the model servers and one point-to-point link
between it and the agent's (root) namespace, impaired by a :class:`NetworkProfile`, and removes
both when closed. The link's addresses (``10.213.<index>.1`` agent, ``.2`` servers, a /30) exist
only on this host, on devices the link owns; a blackhole route for 10.213.0.0/16 is held while
links exist, so a packet for a torn-down link is dropped here instead of leaving the host.

Two emulators, the same parameters (recorded with the run as ``emulator``):

* ``netem``: a veth pair with ``tc qdisc … netem delay D J distribution normal loss L`` on both
  ends (D = half the round trip; Linux ``sch_netem``).
* ``tun-delayline``: where the kernel lacks ``sch_netem``, two TUN devices bridged by
  :mod:`rejoinder.hosting.delayline` (the same packet-level delay, jitter and loss in user space).

Everything needs CAP_NET_ADMIN (``ip netns add``). :func:`preflight` checks it without leaving
anything behind and raises :class:`NetworkUnavailable` naming the reason, so a bench stops before
it starts anything.

Profile figures are typical published round trips, not measurements of any cloud: AWS describes
latency between Availability Zones as single-digit milliseconds and within one as sub-millisecond;
US east ↔ west inter-region round trips are commonly 60–75 ms.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError, RejoinderError


class NetworkUnavailable(RejoinderError):
    """Network profiles cannot be set up here (no ``ip``, no CAP_NET_ADMIN, no emulator)."""


class NetworkProfile(BaseModel):
    """Added round trip (ms), its jitter (σ, ms, per direction) and packet loss (%, per direction)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    rtt_ms: float = Field(ge=0)
    jitter_ms: float = Field(0.0, ge=0)
    loss_pct: float = Field(0.0, ge=0, le=50)
    description: str = ""


PROFILES: dict[str, NetworkProfile] = {p.name: p for p in (
    NetworkProfile(name="loopback", rtt_ms=0.0, description="model servers on 127.0.0.1, no namespace"),
    NetworkProfile(name="same-zone", rtt_ms=0.5, jitter_ms=0.05,
                   description="agent and servers in one availability zone"),
    NetworkProfile(name="cross-zone", rtt_ms=2.0, jitter_ms=0.2,
                   description="servers in another availability zone of the region"),
    NetworkProfile(name="regional", rtt_ms=20.0, jitter_ms=2.0,
                   description="agent outside the cloud region, same geography"),
    NetworkProfile(name="cross-region", rtt_ms=70.0, jitter_ms=5.0,
                   description="servers in another region (e.g. US east ↔ west)"),
    NetworkProfile(name="regional-lossy", rtt_ms=20.0, jitter_ms=2.0, loss_pct=1.0,
                   description="regional with 1 % packet loss each way"),
)}

SUBNET = "10.213.0.0/16"


def profile(name: str) -> NetworkProfile:
    """The named profile.

    Raises:
        ConfigError: an unknown name (lists the valid ones).
    """
    if name not in PROFILES:
        raise ConfigError(f"unknown network profile {name!r}; valid: {', '.join(PROFILES)}")
    return PROFILES[name]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def _netem_available() -> bool:
    """Whether ``tc … netem`` works here (probed on a throwaway veth pair, then removed)."""
    if shutil.which("tc") is None:
        return False
    name = f"rjprobe{os.getpid() % 100000}"
    if _ip("link", "add", name, "type", "veth", "peer", "name", name + "p", check=False).returncode:
        return False
    try:
        res = subprocess.run(["tc", "qdisc", "add", "dev", name, "root", "netem", "delay", "1ms"],
                             capture_output=True, text=True, timeout=20)
        return res.returncode == 0
    finally:
        _ip("link", "del", name, check=False)


def preflight() -> str:
    """Check that profiles can be applied; returns the emulator (``netem`` or ``tun-delayline``).

    Raises:
        NetworkUnavailable: the reason and the fix; nothing is left behind.
    """
    if shutil.which("ip") is None:
        raise NetworkUnavailable("network profiles need the `ip` command (Debian package iproute2)")
    probe = f"rjprobe{os.getpid()}"
    res = _ip("netns", "add", probe, check=False)
    if res.returncode:
        raise NetworkUnavailable("network profiles need CAP_NET_ADMIN to create network namespaces "
                                 f"(`ip netns add` failed: {res.stderr.strip()}); run as root or in a "
                                 "container with --cap-add NET_ADMIN. Nothing was started.")
    _ip("netns", "del", probe, check=False)
    if _netem_available():
        return "netem"
    if os.path.exists("/dev/net/tun"):
        return "tun-delayline"
    raise NetworkUnavailable("this kernel has no sch_netem and no /dev/net/tun: no way to delay packets. "
                             "Nothing was started.")


@dataclass
class Link:
    """A namespace for the model servers, linked to this one through ``profile``.

    ``with Link(profile, index) as link:`` start servers with ``link.exec_prefix() + argv``
    listening on ``link.server_ip``; the agent connects to that address.
    """

    profile: NetworkProfile
    index: int = 0
    emulator: str | None = None
    seed: int = 0
    _steps: list[list[str]] = field(default_factory=list)
    _relay: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.index < 64:
            raise ConfigError("link index must be within 0..63")
        tag = f"{os.getpid() % 10000}{self.index}"
        self.ns = f"rj{tag}"
        self.dev_agent, self.dev_server = f"rj{tag}a", f"rj{tag}s"
        self.agent_ip, self.server_ip = f"10.213.{self.index * 4 // 256}.{self.index * 4 % 256 + 1}", \
            f"10.213.{self.index * 4 // 256}.{self.index * 4 % 256 + 2}"

    def exec_prefix(self) -> list[str]:
        """argv prefix running a command inside the servers' namespace."""
        return ["ip", "netns", "exec", self.ns]

    def describe(self) -> dict[str, Any]:
        """The profile's parameters and how they were applied (recorded with the run)."""
        return {**self.profile.model_dump(), "emulator": self.emulator, "one_way_delay_ms": self.profile.rtt_ms / 2,
                "emulator_priority": getattr(self, "priority", None),
                "agent_ip": self.agent_ip, "server_ip": self.server_ip, "namespace": self.ns}

    # -- set up / tear down ------------------------------------------------------------------
    def __enter__(self) -> "Link":
        self.up()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.down()

    def _run(self, *args: str) -> None:
        res = subprocess.run(list(args), capture_output=True, text=True, timeout=20)
        if res.returncode:
            raise NetworkUnavailable(f"`{' '.join(args)}` failed: {res.stderr.strip()}")

    def up(self) -> None:
        """Create the namespace, the link and the impairment. On any failure everything created
        so far is removed before :class:`NetworkUnavailable` is raised."""
        self.emulator = self.emulator or preflight()
        try:
            self._run("ip", "netns", "add", self.ns)
            self._steps.append(["ip", "netns", "del", self.ns])
            if _ip("route", "show", "type", "blackhole", SUBNET, check=False).stdout.strip() == "":
                self._run("ip", "route", "add", "blackhole", SUBNET)
                self._steps.append(["ip", "route", "del", "blackhole", SUBNET])
            if self.emulator == "netem":
                self._veth()
            else:
                self._tun()
            ns = ["ip", "-n", self.ns]
            self._run("ip", "addr", "add", f"{self.agent_ip}/30", "dev", self.dev_agent)
            self._run(*ns, "addr", "add", f"{self.server_ip}/30", "dev", self.dev_server)
            self._run("ip", "link", "set", self.dev_agent, "up")
            self._run(*ns, "link", "set", self.dev_server, "up")
            self._run(*ns, "link", "set", "lo", "up")
        except BaseException:
            self.down()
            raise

    def _veth(self) -> None:
        self._run("ip", "link", "add", self.dev_agent, "type", "veth", "peer", "name", self.dev_server)
        self._steps.append(["ip", "link", "del", self.dev_agent])
        self._run("ip", "link", "set", self.dev_server, "netns", self.ns)
        p = self.profile
        if p.rtt_ms or p.loss_pct:
            netem = ["netem", "delay", f"{p.rtt_ms / 2:g}ms"]
            if p.jitter_ms:
                netem += [f"{p.jitter_ms:g}ms", "distribution", "normal"]
            if p.loss_pct:
                netem += ["loss", f"{p.loss_pct:g}%"]
            self._run("tc", "qdisc", "add", "dev", self.dev_agent, "root", *netem)
            self._run("ip", "netns", "exec", self.ns, "tc", "qdisc", "add", "dev", self.dev_server, "root", *netem)

    def _tun(self) -> None:
        p = self.profile
        self._relay = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "delayline.py"),
             "--a", self.dev_agent, "--b", self.dev_server,
             "--delay-ms", f"{p.rtt_ms / 2:g}", "--jitter-ms", f"{p.jitter_ms:g}", "--loss-pct", f"{p.loss_pct:g}",
             "--seed", str(self.seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self._relay.stdout.readline().strip() if self._relay.stdout else ""
        self.priority = line.removeprefix("ready").strip()
        if not line.startswith("ready"):
            err = self._relay.stderr.read() if self._relay.stderr else ""
            self._relay.kill()
            self._relay = None
            raise NetworkUnavailable(f"the delay line did not start: {line} {err.strip()[-300:]}")
        self._run("ip", "link", "set", self.dev_server, "netns", self.ns)

    @property
    def relay_pid(self) -> int | None:
        """The delay line's process id (its CPU and RSS are reported with the servers')."""
        return self._relay.pid if self._relay else None

    def down(self) -> None:
        """Remove everything :meth:`up` created (idempotent)."""
        if self._relay is not None:
            self._relay.terminate()
            try:
                self._relay.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._relay.kill()
                self._relay.wait()
            self._relay = None
        while self._steps:
            subprocess.run(self._steps.pop(), capture_output=True, timeout=20)

