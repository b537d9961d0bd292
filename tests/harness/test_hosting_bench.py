"""``rejoinder bench --hosting … --network …``: plans, preflight, and one real comparison run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from rejoinder.errors import ConfigError
from rejoinder.harness import hosting
from rejoinder.harness.store import open_store


def test_plans_run_in_process_once_and_servers_per_profile():
    items = hosting.plans(["in-process", "servers", "managed-tts"], ["loopback", "regional"])
    assert [p.label for p in items] == ["in-process", "servers@loopback", "servers@regional",
                                        "managed-tts@loopback", "managed-tts@regional"]
    assert hosting.needs_namespaces(items) and not hosting.needs_namespaces(items[:2])
    with_failures = hosting.plans(["servers"], ["loopback"], failures=True)
    assert [p.failure for p in with_failures] == [None, "tts:drop@4%0.5"]
    with pytest.raises(ConfigError, match="in-process, servers, managed-tts"):
        hosting.plans(["cloud"], [])


def test_no_namespaces_means_nothing_starts(monkeypatch):
    from rejoinder.hosting.network import NetworkUnavailable

    def refuse():
        raise NetworkUnavailable("network profiles need CAP_NET_ADMIN … Nothing was started.")

    monkeypatch.setattr(hosting, "preflight", refuse)
    with pytest.raises(NetworkUnavailable, match="CAP_NET_ADMIN"):
        hosting.check_network(hosting.plans(["servers"], ["regional"]))
    assert hosting.check_network(hosting.plans(["servers"], ["loopback"])) is None  # not needed


async def test_a_real_server_on_a_taken_port_says_so(tmp_path):
    """What the retry below keys on: a real ``models serve`` on a port someone holds fails with
    EADDRINUSE in its message (espeak binds before it loads anything)."""
    from rejoinder.hosting.servers import ServerProcess, ServerStartError

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        srv = ServerProcess("tts", ["tts", "--engine", "espeak", "--port", str(held.getsockname()[1])],
                            log_path=str(tmp_path / "tts.log"))
        with pytest.raises(ServerStartError) as err:
            await srv.start(timeout_s=60)
    assert hosting._port_taken(err.value)
    assert not hosting._port_taken(ServerStartError("model server tts did not start: no voice"))


async def test_servers_move_to_new_ports_when_one_was_taken_before_they_bound(monkeypatch, tmp_path):
    """free_port() hands out a port that was free a moment ago; if another process binds it before
    the server does, the deployment starts all three on new ports (twice at most), and otherwise
    raises what the server said."""
    from rejoinder.hosting.network import PROFILES
    from rejoinder.hosting.servers import ServerStartError

    taken, started, stopped = {9001, 9002}, [], []
    fresh = iter([9001, 9100, 9101, 9002, 9200, 9201, 9300, 9301, 9302])

    class Fake(hosting.ServerProcess):
        async def start(self, timeout_s: float = 120.0) -> None:
            port = int(self.args[self.args.index("--port") + 1])
            if port in taken:
                raise ServerStartError(f"model server {self.name} did not start: [Errno 98] error while "
                                       f"attempting to bind on address ('127.0.0.1', {port}): address already in use")
            started.append(port)

        def stop(self) -> None:
            stopped.append(self.name)

    async def no_probe(self) -> None:
        return None

    monkeypatch.setattr(hosting, "ServerProcess", Fake)
    monkeypatch.setattr(hosting, "free_port", lambda: next(fresh))
    monkeypatch.setattr(hosting.Deployment, "_probe", no_probe)
    async with hosting.Deployment(hosting.Plan("servers", PROFILES["loopback"]), 0, tmp_path) as dep:
        assert dep._ports == [9300, 9301, 9302]
        assert {n: int(s.args[s.args.index("--port") + 1]) for n, s in dep.servers.items()} == \
            {"stt": 9300, "tts": 9301, "llm": 9302}
    assert started == [9100, 9101, 9200, 9201, 9300, 9301, 9302] and stopped.count("llm-server") == 3
    fresh = iter([9001] * 9)  # taken three times over: the server's own words come out
    with pytest.raises(ServerStartError, match="address already in use"):
        async with hosting.Deployment(hosting.Plan("servers", PROFILES["loopback"]), 0, tmp_path):
            pass
    other = iter([9400, 9401, 9402])
    monkeypatch.setattr(hosting, "free_port", lambda: next(other))
    taken.add(9401)
    monkeypatch.setattr(Fake, "start", _fails_otherwise)
    with pytest.raises(ServerStartError, match="no voice"):  # not a port problem: no second try
        async with hosting.Deployment(hosting.Plan("servers", PROFILES["loopback"]), 0, tmp_path):
            pass


async def _fails_otherwise(self, timeout_s: float = 120.0) -> None:
    from rejoinder.hosting.servers import ServerStartError

    if self.name == "tts-server":
        raise ServerStartError("model server tts-server did not start: no voice")


def test_managed_endpoint_comparison_end_to_end(tmp_path):
    """Real servers (Whisper, Piper) as processes, the SageMaker-shaped endpoint, a stored run
    with its arrangement, profile, cold starts and per-process resources."""
    store = tmp_path / "runs.sqlite"
    proc = subprocess.run([sys.executable, "-m", "rejoinder", "bench", "--scenarios", "order-digits-real",
                           "--concurrency", "1", "--hosting", "managed-tts", "--network", "loopback",
                           "--store", str(store), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cmp = json.loads(proc.stdout)
    [run] = cmp["runs"]
    assert run["label"] == "managed-tts@loopback" and run["status"] == "finished"
    assert run["turns"] >= 1 and run["segments_sum_max_dev_ms"] <= 1.0
    assert run["cold_start_ms"]["tts"] > 0 and run["cold_start_ms"]["stt"] > 0 and run["cold_start_ms"]["llm"] > 0
    assert {"agent", "tts", "stt", "llm"} <= set(run["resources"]) and run["resources"]["tts"]["rss_peak_mb"] > 50
    assert run["resources"]["llm"]["cpu_s"] > 0  # llama.cpp's server process wrote the replies
    cond = open_store(store).run(run["run_id"])["conditions"]
    assert cond["hosting"] == "managed-tts" and cond["network"] == "loopback"
    assert cond["config"]["stack"]["tts"] == "sagemaker" and cond["config"]["stack"]["stt"] == "cartesia"
    assert cond["config"]["stack"]["llm"] == "openai" and cond["hosting_arrangement"]["llm_hosting"] != "in-process"
    assert cond["config"]["stack"]["sagemaker"]["aws_secret_access_key"] == "<redacted>"
    assert "<redacted>" in cond["servers"]["stt"]["args"]  # the API key is not stored
    assert cond["network_profile"]["rtt_ms"] == 0 and cond["network_profile"]["measured_rtt"]["n"] == 40
    # nothing left running: the servers were stopped
    assert str(cond["servers"]["tts"]["pid"]) not in subprocess.run(["ps", "-e", "-o", "pid="], capture_output=True,
                                                                    text=True).stdout.split()
