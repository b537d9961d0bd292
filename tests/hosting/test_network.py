"""Network profiles on real packets: namespaces, an impaired link, a model server behind it.

Needs CAP_NET_ADMIN (root here and in CI). The verification the issue asks for: the round trip a
profile adds on the model-server socket is within 10 % of the profile's delay."""

from __future__ import annotations

import os
import re
import statistics
import subprocess

import pytest

from rejoinder.hosting import network
from rejoinder.hosting.network import Link, NetworkUnavailable, profile
from rejoinder.hosting.servers import ServerProcess, socket_rtt_ms


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def emulator() -> str | NetworkUnavailable:
    """The emulator in use, or — only where this process lacks CAP_NET_ADMIN — the error saying
    so (root, as in CI and ``make test`` here, must get a working emulator)."""
    try:
        return network.preflight()
    except NetworkUnavailable as exc:
        if os.geteuid() == 0:
            raise
        return exc


def _unavailable(emulator) -> bool:
    """True (after checking the error is the clear one) when profiles cannot run here."""
    if isinstance(emulator, NetworkUnavailable):
        assert "CAP_NET_ADMIN" in str(emulator) and not re.search(r"^rj", _namespaces(), re.M)
        return True
    return False


@pytest.mark.parametrize("name", ["regional", "cross-region"])
async def test_added_round_trip_matches_the_profile(emulator, name, tmp_path):
    if _unavailable(emulator):
        return
    prof = profile(name)
    serve = ["tts", "--protocol", "cartesia", "--engine", "espeak", "--api-key", "k"]
    base = ServerProcess("loopback", [*serve, "--host", "127.0.0.1", "--port", "47311"],
                         log_path=str(tmp_path / "lo.log"))
    with Link(prof, index=7) as link:
        far = ServerProcess("far", [*serve, "--host", link.server_ip, "--port", "47312"],
                            prefix=link.exec_prefix(), log_path=str(tmp_path / "far.log"))
        try:
            await base.start()
            await far.start()
            tries = []
            for _ in range(3):  # on a shared machine a woken process may wait for a CPU: retry
                near_ms = statistics.median(await socket_rtt_ms("ws://127.0.0.1:47311/tts/websocket", "k"))
                far_ms = statistics.median(await socket_rtt_ms(f"ws://{link.server_ip}:47312/tts/websocket", "k"))
                tries.append((round(far_ms - near_ms, 2), near_ms, far_ms))
                if abs(tries[-1][0] - prof.rtt_ms) <= 0.1 * prof.rtt_ms:
                    break
        finally:
            base.stop()
            far.stop()
        assert link.describe()["emulator"] == emulator
    assert abs(tries[-1][0] - prof.rtt_ms) <= 0.1 * prof.rtt_ms, tries
    assert link.ns not in _namespaces()  # removed on exit


def test_missing_ip_command_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(network.shutil, "which", lambda _: None)
    with pytest.raises(NetworkUnavailable, match="iproute2"):
        network.preflight()


def test_a_failed_setup_leaves_nothing_behind(emulator, monkeypatch):
    if _unavailable(emulator):
        return
    link = Link(profile("regional"), index=9)
    real = Link._run

    def failing(self, *args):
        if "addr" in args:
            raise NetworkUnavailable("simulated failure while adding the address")
        return real(self, *args)

    monkeypatch.setattr(Link, "_run", failing)
    with pytest.raises(NetworkUnavailable, match="simulated"):
        link.up()
    assert link.ns not in _namespaces()
    links = subprocess.run(["ip", "link", "show"], capture_output=True, text=True).stdout
    assert link.dev_agent not in links
    assert "10.213.0.0/16" not in subprocess.run(["ip", "route"], capture_output=True, text=True).stdout


def test_unknown_profile_lists_the_valid_ones():
    from rejoinder.errors import ConfigError

    with pytest.raises(ConfigError, match="regional"):
        profile("mars")
