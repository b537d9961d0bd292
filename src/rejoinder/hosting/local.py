"""Model servers inside this process, on an ephemeral loopback port (tests and benchmarks).

Each context manager starts one server on the running event loop with a model port the caller
already loaded, yields ``(server, base_url)``, and stops it on exit. The sockets are real: the
adapters under test talk to the server code over TCP exactly as to a ``models serve`` process.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

from ..ports import STTPort, TTSPort
from .wire import ServerFaults


@asynccontextmanager
async def _listening(server, host: str) -> AsyncIterator[tuple[object, str]]:
    ws = await server.serve(host, 0)
    try:
        yield server, f"ws://{host}:{ws.sockets[0].getsockname()[1]}"
    finally:
        ws.close()
        await ws.wait_closed()


@asynccontextmanager
async def cartesia_tts(tts: TTSPort, *, api_key: str | None = "local-key", host: str = "127.0.0.1",
                       faults: ServerFaults | None = None) -> AsyncIterator[tuple[object, str]]:
    """A :class:`~rejoinder.hosting.cartesia_tts_server.CartesiaTTSServer`; yields (server, ws URL)."""
    from .cartesia_tts_server import CartesiaTTSServer

    async with _listening(CartesiaTTSServer(tts, api_key=api_key, faults=faults), host) as pair:
        yield pair


@asynccontextmanager
async def cartesia_stt(stt: STTPort, *, api_key: str | None = "local-key", host: str = "127.0.0.1",
                       faults: ServerFaults | None = None, idle_s: float = 20.0
                       ) -> AsyncIterator[tuple[object, str]]:
    """A :class:`~rejoinder.hosting.cartesia_stt_server.CartesiaSTTServer`; yields (server, ws URL)."""
    from .cartesia_stt_server import CartesiaSTTServer

    async with _listening(CartesiaSTTServer(stt, api_key=api_key, faults=faults, idle_s=idle_s), host) as pair:
        yield pair


@asynccontextmanager
async def sagemaker_tts(tts: TTSPort, *, access_key: str | None, secret_key: str | None,
                        endpoint_name: str = "rejoinder-tts", host: str = "127.0.0.1",
                        faults: ServerFaults | None = None) -> AsyncIterator[tuple[object, str]]:
    """The SageMaker-shaped endpoint under uvicorn; yields (FastAPI app, http base URL)."""
    import uvicorn

    from .sagemaker_server import create_app

    app = create_app(tts, endpoint_name=endpoint_name, access_key=access_key, secret_key=secret_key,
                     faults=faults)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=0, log_level="error", lifespan="off"))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.get_running_loop().create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield app, f"http://{host}:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def nova_sonic(stt: STTPort, llm, tts: TTSPort, vad_factory, *, host: str = "127.0.0.1"
                     ) -> AsyncIterator[tuple[object, str]]:
    """A :class:`~rejoinder.hosting.nova_sonic_server.NovaSonicServer` (Nova Sonic's event protocol
    over the embedded models); yields (server, ws base URL)."""
    from .nova_sonic_server import NovaSonicServer

    async with _listening(NovaSonicServer(stt, llm, tts, vad_factory), host) as pair:
        yield pair


@asynccontextmanager
async def sagemaker_bidi(stage: str, model, *, host: str = "127.0.0.1", faults: ServerFaults | None = None
                         ) -> AsyncIterator[tuple[object, str]]:
    """A :class:`~rejoinder.hosting.sagemaker_bidi_server.BidiContainer` for ``stage`` (stt | tts);
    yields (container, ws base URL)."""
    from .sagemaker_bidi_server import BidiContainer

    async with _listening(BidiContainer(stage, model, faults=faults), host) as pair:
        yield pair
