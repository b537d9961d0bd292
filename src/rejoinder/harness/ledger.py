"""The data-boundary ledger: which service received what in a call, and where records were written.

Every run's conditions hold the run's ledger (``conditions["data_boundary"]``, from the stack's
configuration: each adapter names the endpoint it sends to), and every call's record holds what
crossed each boundary in *that* call (``calls.extra["ledger"]``: the same entries with counts
from the call's own boundaries — STT requests, LLM requests, tool runs, TTS requests). Kinds of
data (:data:`DATA`):

================  ==============================================================================
caller_audio      the caller's voice (to the STT, or the speech-to-speech service)
transcripts       what the caller said as text (from the STT; inside every later LLM prompt)
prompts           the agent's instructions and the call's chat history (to the LLM)
tool_arguments    what the LLM asked a tool to do (from the LLM; run in the agent process)
tool_results      what the tools returned (the agent's data; back to the LLM)
generated_text    what the agent said as text (from the LLM; to the TTS)
recording         the call's stereo audio (``call.wav``), when kept
logs              timelines and transcripts (artifacts), the run store, model-server logs,
                  telemetry (an OTLP endpoint when exporting)
================  ==============================================================================

An entry is ``{"data", "service", "arrangement", "endpoint", "role"}`` with ``role`` ``receives``
(the data is sent there), ``produces`` (it comes from there) or ``writes`` (a file or store).
``endpoint`` is a URL (or ``in-process`` / a path); :func:`endpoints` lists the network ones.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

DATA = ("caller_audio", "transcripts", "prompts", "tool_arguments", "tool_results", "generated_text",
        "recording", "logs")
AGENT = "agent process"


def stage_endpoint(kind: str, stack: Any) -> tuple[str, str]:
    """(service, endpoint) of the ``stt`` / ``llm`` / ``tts`` adapter configured in ``stack``."""
    name = getattr(stack, kind)
    env = os.environ.get
    if name == "cartesia":
        o = stack.cartesia_stt if kind == "stt" else stack.cartesia
        base = (o.base_url or env("CARTESIA_BASE_URL") or "wss://api.cartesia.ai").rstrip("/")
        return (f"Cartesia {'Ink' if kind == 'stt' else 'Sonic'}", f"{base}/{kind}/websocket")
    if name == "sagemaker":
        o = stack.sagemaker
        region = o.region or env("AWS_REGION") or "us-east-1"
        base = (o.base_url or env("REJOINDER_SAGEMAKER_URL") or f"https://runtime.sagemaker.{region}.amazonaws.com")
        ep = o.endpoint_name or env("REJOINDER_SAGEMAKER_ENDPOINT")
        return ("SageMaker response stream", f"{base.rstrip('/')}/endpoints/{ep}/invocations-response-stream")
    if name == "sagemaker-bidi":
        o = stack.sagemaker_bidi
        url, ep = getattr(o, f"{kind}_url"), getattr(o, f"{kind}_endpoint")
        where = f"{url.rstrip('/')}/invocations-bidirectional-stream?model={kind}" if url else \
            f"https://runtime.sagemaker.{o.region or env('AWS_REGION') or 'us-east-1'}.amazonaws.com:8443/endpoints/{ep}" \
            "/invocations-bidirectional-stream"
        return ("SageMaker bidirectional stream", where)
    if name == "openai":
        o = stack.openai
        base = (o.base_url or env("REJOINDER_LLM_BASE_URL") or "").rstrip("/")
        return (f"OpenAI-compatible chat API ({o.model or env('REJOINDER_LLM_MODEL') or 'default'})",
                f"{base}/chat/completions")
    if kind == "llm" and name in ("smollm2", "llama") and stack.llama.model_path:
        # a user's own GGUF (--llm-model): name the file the prompts went to, not the adapter
        return (f"{os.path.basename(stack.llama.model_path)} on llama.cpp ({AGENT})", "in-process")
    return (f"{name} ({AGENT})", "in-process")


def run_ledger(cfg: Any, *, arrangement: str = "in-process", s2s_endpoint: str | None = None,
               artifacts: str | None = None, keep_audio: bool = False, store: str | None = None,
               server_logs: str | None = None) -> dict[str, Any]:
    """The ledger of a run of ``cfg`` (an :class:`~rejoinder.config.AgentConfig`) under
    ``arrangement``; ``s2s_endpoint``: the speech-to-speech service's URL (that arrangement)."""
    entries: list[dict[str, Any]] = []

    def add(data: str, service: str, endpoint: str, role: str) -> None:
        entries.append({"data": data, "service": service, "arrangement": arrangement, "endpoint": endpoint,
                        "role": role})

    if s2s_endpoint:
        svc = "speech-to-speech service (Nova Sonic protocol)"
        for d in ("caller_audio", "prompts", "tool_results"):
            add(d, svc, s2s_endpoint, "receives")
        for d in ("transcripts", "tool_arguments", "generated_text"):
            add(d, svc, s2s_endpoint, "produces")
        add("tool_arguments", f"tools ({AGENT})", "in-process", "receives")
        add("tool_results", f"tools ({AGENT})", "in-process", "produces")
    else:
        stack = cfg.stack
        stt, llm, tts = (stage_endpoint(k, stack) for k in ("stt", "llm", "tts"))
        add("caller_audio", *stt, "receives")
        add("transcripts", *stt, "produces")
        for d in ("transcripts", "prompts", "tool_results"):
            add(d, *llm, "receives")
        for d in ("tool_arguments", "generated_text"):
            add(d, *llm, "produces")
        add("tool_arguments", f"tools ({AGENT})", "in-process", "receives")
        add("tool_results", f"tools ({AGENT})", "in-process", "produces")
        add("generated_text", *tts, "receives")
        backup = getattr(cfg, "backup_tts", None)
        if backup and backup != stack.tts:
            add("generated_text", f"{backup} (backup TTS, {AGENT})", "in-process", "receives")
    add("recording", AGENT, f"{artifacts}/<run>/<call>/call.wav" if keep_audio and artifacts else "not kept",
        "writes")
    if artifacts:
        add("logs", f"{AGENT}: timeline.jsonl, transcript.txt", f"{artifacts}/<run>/<call>/", "writes")
    if store:
        add("logs", f"{AGENT}: run store (transcripts, tool arguments, timings)", store, "writes")
    if server_logs:
        add("logs", "model servers' logs", server_logs, "writes")
    otlp = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if otlp and os.environ.get("OTEL_SDK_DISABLED", "").lower() != "true":
        content = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").lower() == "true"
        add("logs", "OpenTelemetry collector (traces" + (", with transcripts and tool arguments)" if content
                                                        else "; no message content)"), otlp, "receives")
    return {"arrangement": arrangement, "entries": entries}


_COUNTS = {"caller_audio": "stt_request", "transcripts": "transcript_final", "prompts": "llm_request",
           "tool_arguments": "tool_start", "tool_results": "tool_end", "generated_text": "tts_request"}


def call_ledger(ledger: dict[str, Any], turns: list[dict[str, Any]], *, recorded: bool) -> dict[str, Any]:
    """One call's ledger: the run's entries with ``count`` — how many requests carried that data in
    this call (from the call's turn boundaries: STT / LLM / TTS requests, tool runs) — and whether
    the recording was kept."""
    counts: dict[str, int] = {d: 0 for d in _COUNTS}
    for t in turns:
        b = t.get("boundaries") or {}
        for d, name in _COUNTS.items():
            if d in ("tool_arguments", "tool_results"):
                counts[d] += len(t.get("tools") or [])
            elif name == "tts_request":
                counts[d] += len(t.get("tts_chunks") or []) or (1 if name in b else 0)
            else:
                counts[d] += 1 if name in b else 0
    s2s = any(e["service"].startswith("speech-to-speech") for e in ledger.get("entries", []))
    if s2s:  # the service hears every frame, whatever it answers
        counts["caller_audio"] = max(counts["caller_audio"], 1)
    out = []
    for e in ledger.get("entries", []):
        n = counts.get(e["data"])
        if e["data"] == "recording":
            n = 1 if recorded else 0
        out.append({**e, "count": n})
    return {"arrangement": ledger.get("arrangement"), "entries": out}


def endpoints(ledger: dict[str, Any] | None) -> set[str]:
    """``host:port`` of every network endpoint named in ``ledger`` (default ports for ws/http)."""
    out = set()
    for e in (ledger or {}).get("entries", []):
        u = urlsplit(e["endpoint"])
        if u.scheme in ("ws", "wss", "http", "https") and u.hostname:
            port = u.port or (443 if u.scheme in ("wss", "https") else 80)
            out.add(f"{u.hostname}:{port}")
    return out


def print_ledger(out: Any, ledger: dict[str, Any] | None) -> None:
    """The ledger as a table (``rejoinder runs show``)."""
    from rich import box
    from rich.table import Table

    if not ledger or not ledger.get("entries"):
        out.print("data boundary: not recorded for this run")
        return
    t = Table(title=f"data boundary · who received what ({ledger.get('arrangement')})", box=box.SIMPLE_HEAD)
    for h in ("data", "role", "service", "endpoint"):
        t.add_column(h, overflow="fold")
    for e in ledger["entries"]:
        t.add_row(e["data"], e["role"], e["service"], e["endpoint"])
    out.print(t)
