"""The Pipecat reference bot: the standard Pipecat 1.14 pipeline behind a Twilio Media Streams socket.

Runs in its own virtualenv (``bench/peers/setup.sh`` → ``bench/peers/.venv``), never in rejoinder's.
Pipecat's own defaults throughout:

* transport: FastAPI WebSocket (``FastAPIWebsocketTransport``) with ``TwilioFrameSerializer``
  (μ-law 8 kHz; ``clear`` on interruption); the pipeline hears at 16 kHz (what Whisper reads) and
  speaks at 8 kHz;
* VAD: ``SileroVADAnalyzer()`` (ONNX, bundled with Pipecat); end of turn: the default user-turn
  stop strategy, ``LocalSmartTurnAnalyzerV3`` (Smart Turn v3, ONNX, bundled) — no torch;
* STT: ``WhisperSTTService`` (faster-whisper) on rejoinder's prepared local Whisper base folder;
* LLM: ``OpenAILLMService`` against llama.cpp's OpenAI-compatible server (SmolLM2-135M), with the
  agent's system prompt, temperature, token cap and tools (given as a JSON file);
* TTS: ``PiperTTSService`` with the en_US-joe-medium voice, loaded from the folder given (no
  download).

Tools run in the process that defined them (``tools_http.py``, in rejoinder's venv): each tool call
is forwarded to ``POST {tools-url}/{stream sid}/tools/{tool}``, so both bots run the very same tool
code on the same kind of per-call database; the agent's greeting comes from
``GET {tools-url}/{stream sid}/greeting`` and is spoken when the call opens, as rejoinder does.

Besides the socket (``/twilio``) the bot answers ``GET /health``, and, with ``--token``,
``GET /info`` and ``GET /calls/{streamSid}`` like ``rejoinder serve`` (PROTOCOL.md, "Call
reports"): Pipecat's own latency measurement per turn (``UserBotLatencyObserver``: user stopped
speaking → bot started speaking, with its breakdown) is reported as ``self_reported``.

    bench/peers/.venv/bin/python bench/peers/pipecat_bot.py --port 8790 --whisper-dir DIR \\
        --piper-voice .../en_US-joe-medium.onnx --llm-url http://127.0.0.1:8791/v1 --agent agent.json
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import time
from collections import OrderedDict
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse
from loguru import logger

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.frames.frames import TTSSpeakFrame
from pipecat.observers.user_bot_latency_observer import UserBotLatencyObserver
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair, LLMUserAggregatorParams
from pipecat.runner.utils import parse_telephony_websocket
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.services.piper.tts import PiperTTSService
from pipecat.services.whisper.stt import WhisperSTTService
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport
from pipecat.workers.runner import WorkerRunner

KEEP_REPORTS = 256


def share_models() -> None:
    """Load the Whisper model and the Piper voice once per process, like ``rejoinder serve``:
    Pipecat's services load them in their constructors, per call (measured: 1–7 s on a loaded
    2-core machine, while the caller is already talking). Same classes, same settings — only the
    loading is cached (faster-whisper and onnxruntime sessions serve concurrent calls)."""
    import functools

    import pipecat.services.piper.tts as piper_mod
    import pipecat.services.whisper.stt as whisper_mod

    whisper_mod.WhisperModel = functools.lru_cache(maxsize=4)(whisper_mod.WhisperModel)
    load = piper_mod.PiperVoice.load
    piper_mod.PiperVoice.load = staticmethod(functools.lru_cache(maxsize=4)(lambda path, **kw: load(path, **kw)))


class LlamaCppLLMService(OpenAILLMService):
    """``OpenAILLMService`` for llama.cpp's server, which answers HTTP 500 to the ``developer``
    role Pipecat uses for its own notes to the LLM; declared as Pipecat does for Ollama."""

    supports_developer_role = False


class Bot:
    """Settings shared by every call, and the per-call reports."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.agent = json.loads(Path(args.agent).read_text()) if args.agent else {}
        self.voice = Path(args.piper_voice)
        self.reports: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.active = 0
        share_models()
        self._services()  # load both now, not during the first call

    def _services(self) -> tuple[WhisperSTTService, PiperTTSService]:
        # the quantisation rejoinder runs this model with, and the agent's vocabulary prompt
        stt = WhisperSTTService(settings=WhisperSTTService.Settings(
            model=self.args.whisper_dir, initial_prompt=self.agent.get("stt_prompt")), device="cpu", compute_type="int8")
        tts = PiperTTSService(settings=PiperTTSService.Settings(voice=self.voice.stem), download_dir=self.voice.parent)
        return stt, tts

    def info(self) -> dict[str, Any]:
        a = self.args
        return {"server": "pipecat reference bot", "call_reports": True, "protocols": ["/twilio"],
                "pipecat": metadata.version("pipecat-ai"),
                "pipeline": ["FastAPIWebsocketTransport+TwilioFrameSerializer", "SileroVADAnalyzer",
                             "LocalSmartTurnAnalyzerV3 (default user-turn stop strategy)",
                             "WhisperSTTService (faster-whisper)", "OpenAILLMService (llama.cpp server)",
                             "PiperTTSService"],
                "models": {"stt": a.whisper_dir, "tts": str(self.voice), "llm": {"url": a.llm_url, "model": a.llm_model}},
                "agent": {k: self.agent.get(k) for k in ("instructions", "temperature", "max_tokens")}
                | {"tools": [t["name"] for t in self.agent.get("tools", [])]}}

    def tools(self, sid: str, phone: str | None, report: dict[str, Any]) -> ToolsSchema | None:
        specs = self.agent.get("tools") or []
        if not specs:
            return None
        url = self.args.tools_url

        def handler_for(name: str):
            async def handler(params: FunctionCallParams) -> None:
                t0 = time.time()
                body = {"args": dict(params.arguments), "caller_phone": phone}
                async with aiohttp.ClientSession() as http:
                    async with http.post(f"{url}/{sid}/tools/{name}", json=body) as r:
                        answer = await r.json()
                report["tools"].append({"name": name, "args": dict(params.arguments), "at": t0,
                                        "duration_ms": round(1000 * (time.time() - t0), 1),
                                        **({"error": answer["error"]} if "error" in answer else {})})
                # what rejoinder tells its LLM: the result, or {"error": …}
                await params.result_callback(answer["result"] if "result" in answer else answer)
            return handler

        return ToolsSchema(standard_tools=[
            FunctionSchema(name=t["name"], description=t.get("description", ""),
                           properties=t["parameters"].get("properties", {}),
                           required=t["parameters"].get("required", []), handler=handler_for(t["name"]))
            for t in specs])

    async def _greeting(self, sid: str, phone: str | None) -> str | None:
        if not (self.args.tools_url and self.agent.get("greets")):
            return None
        answer = await _fetch(f"{self.args.tools_url}/{sid}/greeting?caller_phone={phone or ''}")
        return (answer or {}).get("text")

    async def call(self, ws: WebSocket) -> None:
        try:
            _, data = await parse_telephony_websocket(ws)
        except ValueError:  # closed before 'start' (a harness probing the socket)
            return
        params = dict(data.get("body") or {})
        if self.args.token and not hmac.compare_digest(params.get("token", "").encode(), self.args.token.encode()):
            await ws.close(4401, "wrong token")
            return
        sid, phone = data["stream_id"], params.get("caller_phone")
        report = self.reports[sid] = {"call_id": sid, "transport": "twilio", "status": "running",
                                      "self_reported": [], "tools": [], "caller_phone": phone}
        while len(self.reports) > KEEP_REPORTS:
            self.reports.popitem(last=False)
        self.active += 1
        try:
            await self._run(ws, sid, data.get("call_id"), phone, report)
        finally:
            self.active -= 1
            report["status"] = "ended"

    async def _run(self, ws: WebSocket, sid: str, call_sid: str | None, phone: str | None,
                   report: dict[str, Any]) -> None:
        a, agent = self.args, self.agent
        transport = FastAPIWebsocketTransport(ws, FastAPIWebsocketParams(
            audio_in_enabled=True, audio_out_enabled=True, add_wav_header=False,
            serializer=TwilioFrameSerializer(sid, call_sid, params=TwilioFrameSerializer.InputParams(auto_hang_up=False))))
        stt, tts = await asyncio.to_thread(self._services)  # off the event loop: other calls go on
        llm = LlamaCppLLMService(api_key="none", base_url=a.llm_url, settings=LlamaCppLLMService.Settings(
            model=a.llm_model, temperature=agent.get("temperature", 0.0), max_tokens=agent.get("max_tokens", 60),
            system_instruction=agent.get("instructions") or "You are a helpful phone assistant."))
        tools = self.tools(sid, phone, report)
        context = LLMContext(tools=tools) if tools else LLMContext()
        user, assistant = LLMContextAggregatorPair(
            context, user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer()))
        latency = UserBotLatencyObserver()

        @latency.event_handler("on_latency_measured")
        async def _measured(_obs, secs: float) -> None:
            report["self_reported"].append({"at": time.time(), "latency_ms": round(1000 * secs, 1)})

        @latency.event_handler("on_latency_breakdown")
        async def _breakdown(_obs, breakdown) -> None:
            report["self_reported"].append({"at": time.time(), "breakdown": breakdown.model_dump(mode="json")})

        worker = PipelineWorker(
            Pipeline([transport.input(), stt, user, llm, tts, transport.output(), assistant]),
            # Whisper reads 16 kHz (WhisperSTTService does not resample): the serializer takes the
            # caller's 8 kHz μ-law up to 16 kHz; the bot speaks at the line's 8 kHz
            params=PipelineParams(audio_in_sample_rate=16000, audio_out_sample_rate=8000, enable_metrics=True,
                                  enable_usage_metrics=True),
            observers=[latency], idle_timeout_secs=None)

        @transport.event_handler("on_client_disconnected")
        async def _gone(_transport, _ws) -> None:
            await worker.cancel()

        greeting = await self._greeting(sid, phone)
        if greeting:  # the agent's greeting when the call opens, as rejoinder says it
            await worker.queue_frames([TTSSpeakFrame(greeting)])

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        await runner.run()


async def _fetch(url: str) -> Any:
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as r:
            return await r.json() if r.status == 200 else None


def make_app(bot: Bot) -> FastAPI:
    app = FastAPI(title="pipecat reference bot", docs_url=None, redoc_url=None)

    def authorized(request: Request) -> bool:
        if not bot.args.token:
            return True
        given = request.headers.get("authorization", "")
        given = given[7:] if given.lower().startswith("bearer ") else request.query_params.get("token", "")
        return hmac.compare_digest(given.encode(), bot.args.token.encode())

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok", "models": "ready", "calls": bot.active})

    @app.get("/info")
    async def info(request: Request) -> JSONResponse:
        if not authorized(request):
            return JSONResponse({"detail": "missing or wrong token"}, status_code=401)
        return JSONResponse(bot.info())

    @app.get("/calls/{sid}")
    async def call_report(sid: str, request: Request) -> JSONResponse:
        if not authorized(request):
            return JSONResponse({"detail": "missing or wrong token"}, status_code=401)
        report = bot.reports.get(sid)
        if report is None:
            return JSONResponse({"detail": f"no call {sid!r}"}, status_code=404)
        if bot.args.tools_url and report["status"] == "ended" and "db" not in report:
            report["db"] = await _fetch(f"{bot.args.tools_url}/{sid}/state")  # the agent's final state
        return JSONResponse(report)

    @app.websocket("/twilio")
    async def twilio(ws: WebSocket) -> None:
        await ws.accept()
        try:
            await bot.call(ws)
        except Exception:  # noqa: BLE001 — one bad call never takes the bot down
            logger.exception("call failed")

    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8790)
    ap.add_argument("--token", default=None, help="required as the Twilio custom parameter 'token' and for the reports")
    ap.add_argument("--whisper-dir", required=True, help="a local CTranslate2 Whisper folder (no hub download)")
    ap.add_argument("--piper-voice", required=True, help="the Piper voice .onnx (its .onnx.json beside it)")
    ap.add_argument("--llm-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8791/v1")
    ap.add_argument("--llm-model", default="smollm2-135m")
    ap.add_argument("--agent", default=None, help="JSON (tools_http.agent_definition): instructions, temperature, "
                    "max_tokens, tools [{name, description, parameters}], stt_prompt, greets")
    ap.add_argument("--tools-url", default=None, help="where the agent's tools run (bench/peers/tools_http.py)")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args()
    import sys
    logger.remove()
    logger.add(sys.stderr, level=args.log_level)
    uvicorn.run(make_app(Bot(args)), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
