"""``rejoinder bench --hosting … --network …``: plans, preflight, and one real comparison run."""

from __future__ import annotations

import json
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
