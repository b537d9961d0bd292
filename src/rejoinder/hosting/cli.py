"""``rejoinder models serve tts|stt|llm``: the embedded models behind the services' protocols.

Each server loads its model, then listens, then prints one line ``ready <url>`` on stdout (the
harness measures cold start from process start to the first answered request). SIGTERM/SIGINT
stop it cleanly.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Optional

import typer

PROTOCOLS = {"tts": ("cartesia", "sagemaker", "sagemaker-bidi"), "stt": ("cartesia", "sagemaker-bidi"),
             "llm": ("openai",), "s2s": ("nova-sonic",)}


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def register(app: typer.Typer) -> None:
    """Add ``models serve`` to ``app``."""
    models = typer.Typer(help="Serve the embedded models behind the services' wire protocols.",
                         no_args_is_help=True)
    app.add_typer(models, name="models")

    @models.command("serve")
    def serve(stage: str = typer.Argument(..., help="tts | stt | llm | s2s"),
              protocol: Optional[str] = typer.Option(None, help="tts: cartesia | sagemaker | "
                                                     "sagemaker-bidi; stt: cartesia | sagemaker-bidi; "
                                                     "llm: openai; s2s: nova-sonic (the default for each)"),
              host: str = typer.Option("127.0.0.1", help="interface to listen on"),
              port: int = typer.Option(..., help="TCP port"),
              engine: Optional[str] = typer.Option(None, help="tts: piper (default) | espeak"),
              api_key: Optional[str] = typer.Option(None, envvar="REJOINDER_SERVER_API_KEY",
                                                    help="key clients must send (Cartesia); "
                                                    "default: no authentication"),
              endpoint_name: str = typer.Option("rejoinder-tts", help="sagemaker: the endpoint name"),
              region: str = typer.Option("us-east-1", help="sagemaker: the region in signatures"),
              faults: Optional[str] = typer.Option(None, help="server-side faults, e.g. "
                                                   "'tts:error@3%0.2' or 'tts:garbage@1'"),
              fault_seed: int = typer.Option(0, help="seed of the server-side faults"),
              initial_prompt: Optional[str] = typer.Option(None, help="stt: Whisper's prompt (default: "
                                                           "the agent's, as in-process)"),
              agent: Optional[str] = typer.Option(None, help="stt: the agent whose vocabulary prompts "
                                                  "Whisper (default: the reference support agent)"),
              interim_ms: float = typer.Option(0.0, help="stt: interim transcripts every N ms of audio")) -> None:
        """Serve one model stage: TTS over Cartesia Sonic's WebSocket, a SageMaker-shaped
        response stream or the SageMaker bidirectional-streaming container contract, STT over
        Cartesia Ink's WebSocket or the bidirectional contract, LLM over the OpenAI chat API, and
        speech to speech (VAD + Whisper + SmolLM2 + Piper) over Nova Sonic's event protocol."""
        from ..cliout import console as make_console
        from ..cliout import error
        from ..errors import RejoinderError
        from ..ports import PortError
        from .wire import ServerFaults

        console = make_console(stderr=True)
        protocol = protocol or PROTOCOLS.get(stage, ("",))[0]
        if stage not in PROTOCOLS or protocol not in PROTOCOLS[stage]:
            error(console, f"cannot serve {stage!r} over {protocol!r}; valid: "
                  + "; ".join(f"{s}: {', '.join(p)}" for s, p in PROTOCOLS.items()))
            raise typer.Exit(2)
        try:
            injected = ServerFaults.parse(faults, stage, fault_seed) if stage in ("stt", "tts") else None
            if stage == "llm":
                _serve_llm(host, port)
                return
            if stage in ("stt", "s2s") and initial_prompt is None:  # the same prompt as the in-process STT
                from ..agent import load_agent
                initial_prompt = load_agent(agent).stt_prompt() or ""
            asyncio.run(_serve(stage, protocol, host, port, engine, api_key, endpoint_name, region,
                               injected, initial_prompt, interim_ms, console))
        except RejoinderError as exc:
            error(console, exc)
            raise typer.Exit(2)
        except PortError as exc:
            error(console, f"the {stage} server failed: {exc}")
            raise typer.Exit(1)
        except OSError as exc:
            error(console, f"cannot listen on {host}:{port}: {exc}")
            raise typer.Exit(2)


def _build_tts(engine: str | None):
    from ..adapters.registry import BUILDERS, StackConfig, validate

    cfg = StackConfig(tts=engine or "piper")
    if cfg.tts not in ("piper", "espeak"):
        from ..errors import ConfigError
        raise ConfigError(f"the TTS server serves a local engine: piper or espeak, not {cfg.tts!r}")
    validate(cfg)
    return BUILDERS["tts"][cfg.tts](cfg)


def _build_stt(initial_prompt: str | None):
    from ..adapters.registry import BUILDERS, StackConfig

    cfg = StackConfig()
    cfg.whisper.initial_prompt = initial_prompt or None
    return BUILDERS["stt"]["whisper-base"](cfg)


async def _run_ws(server, host: str, port: int, path: str) -> None:
    """Listen with a WebSocket server until SIGTERM/SIGINT."""
    ws = await server.serve(host, port)
    _say(f"ready ws://{host}:{port}{path}")
    try:
        await _until_stopped()
    finally:
        ws.close()
        await ws.wait_closed()


async def _serve(stage, protocol, host, port, engine, api_key, endpoint_name, region, faults,
                 initial_prompt, interim_ms, console) -> None:
    if stage == "s2s":
        await _serve_s2s(host, port, engine, initial_prompt)
        return
    if protocol == "sagemaker-bidi":
        from .sagemaker_bidi_server import PATH, BidiContainer

        model = await asyncio.to_thread(_build_stt, initial_prompt) if stage == "stt" else \
            await asyncio.to_thread(_build_tts, engine)
        await _run_ws(BidiContainer(stage, model, faults=faults), host, port, PATH)
        return
    if stage == "stt":
        from .cartesia_stt_server import CartesiaSTTServer

        server = CartesiaSTTServer(await asyncio.to_thread(_build_stt, initial_prompt), api_key=api_key,
                                   interim_ms=interim_ms, faults=faults)
        await _run_ws(server, host, port, "/stt/websocket")
        return
    tts = await asyncio.to_thread(_build_tts, engine)
    if protocol == "cartesia":
        from .cartesia_tts_server import CartesiaTTSServer

        await _run_ws(CartesiaTTSServer(tts, api_key=api_key, faults=faults), host, port, "/tts/websocket")
        return
    import uvicorn

    from .sagemaker_server import create_app

    access, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not (access and secret):
        console.print("[yellow]no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: requests are not authenticated[/]")
    web = create_app(tts, endpoint_name=endpoint_name, access_key=access, secret_key=secret,
                     region=region, faults=faults)
    config = uvicorn.Config(web, host=host, port=port, log_level="warning", lifespan="off")
    srv = uvicorn.Server(config)
    srv.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.get_running_loop().create_task(srv.serve())
    while not srv.started:
        if task.done():
            task.result()
            raise OSError("uvicorn stopped before it listened")
        await asyncio.sleep(0.02)
    _say(f"ready http://{host}:{port}/endpoints/{endpoint_name}/invocations-response-stream")
    try:
        await _until_stopped()
    finally:
        srv.should_exit = True
        await task


async def _serve_s2s(host: str, port: int, engine: str | None, initial_prompt: str | None) -> None:
    """Nova Sonic's event protocol over Silero VAD, Whisper, SmolLM2 and Piper (or espeak)."""
    from ..adapters.nova_sonic import DEFAULT_MODEL
    from ..adapters.registry import BUILDERS, StackConfig
    from .nova_sonic_server import NovaSonicServer

    cfg = StackConfig()
    stt, tts = await asyncio.gather(asyncio.to_thread(_build_stt, initial_prompt),
                                    asyncio.to_thread(_build_tts, engine))
    llm = await asyncio.to_thread(BUILDERS["llm"]["smollm2"], cfg)
    server = NovaSonicServer(stt, llm, tts, lambda: BUILDERS["vad"]["silero"](cfg))
    await server.warmup()
    await _run_ws(server, host, port, f"/model/{DEFAULT_MODEL}/invoke-with-bidirectional-stream")


def _serve_llm(host: str, port: int) -> None:
    """The LLM over the OpenAI chat API: llama-cpp-python's server (``llama_cpp.server``) with
    rejoinder's tool-calling chat format, as a child process (:mod:`rejoinder.adapters.llama_server`).
    Prints ``ready http://HOST:PORT/v1`` once ``/v1/models`` answers; SIGTERM/SIGINT stop both.

    Raises:
        MissingExtra: ``llama-cpp-python[server]``'s dependencies are not installed.
        PortError: the server exited or never answered (the message carries its log's tail).
    """
    from ..adapters import llama_server

    server = llama_server.start(port, host=host)
    stopped = {"sig": False}

    def _stop(*_):
        stopped["sig"] = True
    old = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _say(f"ready {server.base_url}")
        while not stopped["sig"] and server.process.poll() is None:
            time.sleep(0.2)
        if server.process.poll() is not None and not stopped["sig"]:
            from ..ports import PortError
            raise PortError(f"llama_cpp.server exited with code {server.process.returncode}: "
                            f"{server.log_tail()}")
    finally:
        server.stop()
        for sig, h in old.items():
            signal.signal(sig, h)
