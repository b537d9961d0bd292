"""`rejoinder serve --ray --models stt,llm` on a local cluster it starts itself (one start for the
module): the real model servers — Whisper base behind Cartesia Ink's WebSocket protocol and SmolLM2
behind llama.cpp's OpenAI server — as Serve deployments of their own, reached through Serve's proxy
on loopback by the real adapters (the agent is zero-cost; its stack is pointed at them), and both
deployments, with their options and times to RUNNING, in the serve run's record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "harness"))

from remote_helpers import free_port  # noqa: E402
from rejoinder.adapters.cartesia_stt import CartesiaSTT  # noqa: E402
from rejoinder.adapters.openai_llm import OpenAICompatLLM  # noqa: E402
from rejoinder.harness.store import SQLiteStore  # noqa: E402
from rejoinder.ports import ChatMessage, LLMRequest, PortError  # noqa: E402

KEY = "ray-models-test-key"
PROMPT = Path("/usr/share/asterisk/sounds/en/conf-getpin.wav")  # "Please enter the conference pin number."


class Served:
    def __init__(self, tmp: Path) -> None:
        self.port, self.store, self.err = free_port(), tmp / "runs.sqlite", tmp / "serve.stderr"
        cmd = [sys.executable, "-m", "rejoinder", "serve", "--ray", "local", "--ray-cpus", "2", "--zero-cost",
               "--port", str(self.port), "--token", "ray-models-token", "--max-replicas", "1",
               "--models", "stt,llm", "--models-api-key", KEY, "--duration-s", "1200", "--runs", str(self.store)]
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=dict(os.environ))
        self.lines: list[str] = []
        self.out = ""

    def wait_ready(self, timeout_s: float = 900.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            self.lines.append(line)
            if line.startswith("ready "):
                return line
            if not line and self.proc.poll() is not None:
                raise AssertionError(f"serve --ray exited {self.proc.returncode}: {self.err.read_text()[-3000:]}")
        raise AssertionError("serve --ray never said ready")

    def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.out, _ = self.proc.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.out, _ = self.proc.communicate()
        return self.proc.returncode


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    if not PROMPT.is_file():
        pytest.fail(f"{PROMPT} is missing: install asterisk-core-sounds-en-wav (scripts/setup.sh does)")
    s = Served(tmp_path_factory.mktemp("ray_models"))
    try:
        ready = s.wait_ready()
        assert ready.startswith(f"ready http://127.0.0.1:{s.port} run ")
        s.run_id = ready.split()[3]
        yield s
    finally:
        s.stop()


async def test_the_stt_deployment_transcribes_real_speech_through_the_proxy(served):
    from rejoinder.audio_io import load_audio, resample

    x, sr = load_audio(PROMPT)
    x = resample(x, sr, 16_000)

    async def one():
        yield x

    stt = CartesiaSTT(f"ws://127.0.0.1:{served.port}/models/stt", KEY, pool=0, connect_timeout_s=30)
    out = [t async for t in stt.stream(one())]
    await stt.aclose()
    assert out and out[-1].final
    words = out[-1].text.lower()
    assert "conference" in words and "pin" in words, out[-1].text
    with pytest.raises(PortError, match="authentication failed"):
        [t async for t in CartesiaSTT(f"ws://127.0.0.1:{served.port}/models/stt", "wrong-key", pool=0).stream(one())]


async def test_the_llm_deployment_completes_a_chat_through_the_proxy(served):
    base = f"http://127.0.0.1:{served.port}/models/llm/v1"
    req = LLMRequest(messages=(ChatMessage("system", "You are a helpful assistant."),
                               ChatMessage("user", "Say hello to Anna in one short sentence.")),
                     max_tokens=24, temperature=0.0)
    llm = OpenAICompatLLM(base_url=base, model="smollm2", api_key=KEY, timeout_s=120, warm=True)
    assert llm.warmup("You are a helpful assistant.") > 5  # the system turn prefilled (its prompt tokens)
    text = "".join(d for d in [d async for d in llm.stream(req)] if isinstance(d, str))
    await llm.aclose()
    assert text.strip() and any(c.isalpha() for c in text), repr(text)
    wrong = OpenAICompatLLM(base_url=base, model="smollm2", api_key="wrong-key", timeout_s=60)
    with pytest.raises(PortError, match="401"):
        [d async for d in wrong.stream(req)]
    await wrong.aclose()


def test_both_deployments_are_in_the_serve_run_and_it_stops_cleanly(served):
    running = [json.loads(ln) for ln in served.lines if ln.startswith("{") and '"running"' in ln]
    assert sorted(e["deployment"] for e in running) == ["agent", "llm", "stt"]
    assert all(e["running_ms"] > 0 and e["replicas"] == 1 for e in running)
    assert served.stop() == 0, served.err.read_text()[-3000:]
    assert '"event": "stopped"' in served.out
    st = SQLiteStore(served.store)
    run = st.run(served.run_id)
    st.close()
    assert run["status"] == "finished"
    deps = run["conditions"]["deployments"]
    assert set(deps) == {"agent", "stt", "llm"}
    for name in ("stt", "llm"):
        assert deps[name]["route_prefix"] == f"/models/{name}"
        assert deps[name]["autoscaling_config"]["max_replicas"] == 1
        assert deps[name]["ray_actor_options"]["num_cpus"] == 0.25
    assert deps["llm"]["autoscaling_config"]["target_ongoing_requests"] == 1.0
    stack = run["conditions"]["config"]["stack"]
    assert (stack["stt"], stack["llm"]) == ("cartesia", "openai")  # the agent was pointed at them
    assert stack["openai"]["base_url"] == f"http://127.0.0.1:{served.port}/models/llm/v1" and stack["openai"]["warm"]
    notes = [n["text"] for n in run["notes"]]
    assert any(n.startswith("stt RUNNING") for n in notes) and any(n.startswith("llm RUNNING") for n in notes)
    assert set(run["summary"]["running_ms"]) == {"agent", "stt", "llm"}
