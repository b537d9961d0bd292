"""The data-boundary ledger: what it names per arrangement, its per-call counts, `runs show`, and —
against the network traffic of a real servers arrangement — every endpoint that accepted a
connection during a call is in the ledger."""

from __future__ import annotations

import asyncio

import psutil
import yaml

from rejoinder.config import AgentConfig
from rejoinder.harness.ledger import DATA, call_ledger, endpoints, run_ledger


def test_in_process_keeps_everything_in_the_agent_process():
    led = run_ledger(AgentConfig(), artifacts="/tmp/a", store="/tmp/runs.sqlite")
    assert {e["data"] for e in led["entries"]} == set(DATA)
    sent = [e for e in led["entries"] if e["data"] not in ("recording", "logs")]
    assert all(e["endpoint"] == "in-process" for e in sent)
    assert endpoints(led) == set()
    [rec] = [e for e in led["entries"] if e["data"] == "recording"]
    assert rec["endpoint"] == "not kept"


def test_a_users_gguf_is_named_by_its_file():
    cfg = AgentConfig.model_validate({"stack": {"llama": {"model_path": "/models/qwen-1.5b.gguf"}}})
    led = run_ledger(cfg)
    prompts = {e["service"] for e in led["entries"] if e["data"] == "prompts"}
    assert prompts == {"qwen-1.5b.gguf on llama.cpp (agent process)"}
    assert {e["service"] for e in run_ledger(AgentConfig())["entries"]
            if e["data"] == "prompts"} == {"smollm2 (agent process)"}


def test_a_servers_stack_names_each_endpoint_for_the_data_it_receives():
    cfg = AgentConfig()
    cfg.stack.stt, cfg.stack.tts, cfg.stack.llm = "cartesia", "sagemaker-bidi", "openai"
    cfg.stack.cartesia_stt.base_url = "ws://10.0.0.1:9003"
    cfg.stack.sagemaker_bidi.tts_url = "ws://10.0.0.2:9002"
    cfg.stack.openai.base_url = "http://10.0.0.3:9004/v1"
    led = run_ledger(cfg, arrangement="servers", keep_audio=True, artifacts="/art")
    by = {(e["data"], e["role"]): e["endpoint"] for e in led["entries"] if e["endpoint"] != "in-process"}
    assert by[("caller_audio", "receives")] == "ws://10.0.0.1:9003/stt/websocket"
    assert by[("prompts", "receives")] == "http://10.0.0.3:9004/v1/chat/completions"
    assert by[("tool_results", "receives")] == "http://10.0.0.3:9004/v1/chat/completions"
    assert by[("generated_text", "receives")] == "ws://10.0.0.2:9002/invocations-bidirectional-stream?model=tts"
    assert by[("recording", "writes")] == "/art/<run>/<call>/call.wav"
    assert endpoints(led) == {"10.0.0.1:9003", "10.0.0.2:9002", "10.0.0.3:9004"}


def test_speech_to_speech_sends_everything_to_the_service_and_counts_per_call():
    led = run_ledger(AgentConfig(), arrangement="speech-to-speech", s2s_endpoint="ws://127.0.0.1:9/model/m/x")
    assert {e["data"] for e in led["entries"] if e["endpoint"].startswith("ws://")} == {
        "caller_audio", "prompts", "tool_results", "transcripts", "tool_arguments", "generated_text"}
    turns = [{"boundaries": {"transcript_final": 1, "llm_request": 1, "tts_request": 2}, "tools": [{"name": "x"}],
              "tts_chunks": [{}]}]
    call = call_ledger(led, turns, recorded=False)
    counts = {(e["data"], e["service"][:6]): e["count"] for e in call["entries"]}
    assert counts[("caller_audio", "speech")] == 1 and counts[("tool_arguments", "tools ")] == 1
    assert counts[("generated_text", "speech")] == 1 and counts[("recording", "agent ")] == 0


def test_runs_show_prints_the_ledger(tmp_path):
    from typer.testing import CliRunner

    from rejoinder.cli import app
    from rejoinder.harness.store import open_store

    store = open_store(str(tmp_path / "runs.sqlite"))
    led = run_ledger(AgentConfig(), arrangement="speech-to-speech", s2s_endpoint="ws://127.0.0.1:47001/model/m/x")
    run = store.begin_run({"data_boundary": led, "concurrency": [1]}, suite="t", command="test")
    store.finish_run(run, "finished", {})
    res = CliRunner().invoke(app, ["runs", "show", run, "--store", str(tmp_path / "runs.sqlite")],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "data boundary" in res.output and "ws://127.0.0.1:47001/model/m/x" in res.output
    assert "caller_audio" in res.output and "tool_results" in res.output


async def test_the_ledger_names_every_endpoint_that_accepted_a_connection(tmp_path):
    """A real servers arrangement (STT, TTS and LLM model servers, started by the hosting code):
    sample the TCP connections each server process accepted during one real-speech call."""
    from rejoinder.cli import BUNDLED_CALL
    from rejoinder.harness.hosting import Deployment, Plan
    from rejoinder.hosting.network import PROFILES
    from rejoinder.runtime import Runtime, load_caller

    sc = yaml.safe_load(BUNDLED_CALL.read_text())
    sc["turns"], sc["tail_ms"] = sc["turns"][:1], 1500
    path = tmp_path / "call.yaml"
    path.write_text(yaml.safe_dump(sc))
    async with Deployment(Plan("servers", PROFILES["loopback"]), 0, tmp_path) as dep:
        cfg = AgentConfig()
        cfg.stack = dep.stack_config(cfg.stack)
        led = run_ledger(cfg, arrangement="servers@loopback", server_logs=str(tmp_path))
        procs = {n: psutil.Process(pid) for n, pid in dep.processes().items() if n != "delayline"}
        listening = {n: {c.laddr.port for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
                     for n, p in procs.items()}
        accepted: dict[str, set] = {}

        async def sample() -> None:
            while True:
                for n, p in procs.items():
                    for c in p.net_connections("tcp"):
                        if c.status == psutil.CONN_ESTABLISHED and c.laddr.port in listening[n] and c.raddr:
                            accepted.setdefault(f"{c.laddr.ip}:{c.laddr.port}", set()).add(tuple(c.raddr))
                await asyncio.sleep(0.02)

        sampler = asyncio.get_running_loop().create_task(sample())
        runtime = Runtime(cfg)
        try:
            await runtime.warmup()
            turns, phone, s = await load_caller(path)
            res = await runtime.call(turns, caller_phone=phone, tail_ms=s.tail_ms)
        finally:
            sampler.cancel()
            for port in (runtime.models.stt, runtime.models.tts, runtime.models.llm):
                close = getattr(port, "aclose", None)
                if close is not None:
                    await close()
    assert res.error is None
    ports = {n: sorted(v) for n, v in listening.items()}
    assert len(accepted) == 3, (accepted, ports)  # STT, TTS and LLM each accepted connections
    missing = set(accepted) - endpoints(led)
    assert not missing, f"endpoints that took connections but are not in the ledger: {missing}"
    counts = {e["data"]: e["count"] for e in call_ledger(led, [r.summary() for r in res.turns],
                                                             recorded=False)["entries"] if e["role"] == "receives"}
    assert counts["caller_audio"] >= 1 and counts["prompts"] >= 1 and counts["generated_text"] >= 1


def test_runs_show_names_a_users_gguf_in_the_stack_line():
    from rejoinder.harness.cli import _stack_names
    stack = {"vad": "silero", "llm": "smollm2", "tts": "piper", "llama": {"model_path": "/m/q.gguf"}}
    assert _stack_names(stack) == "vad=silero llm=q.gguf tts=piper"
    assert _stack_names({"llm": "openai", "llama": {"model_path": "/m/q.gguf"}}) == "llm=openai"
    assert _stack_names({"llm": "smollm2", "llama": {"model_path": None}}) == "llm=smollm2"
