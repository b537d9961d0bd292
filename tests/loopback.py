"""An ASGI app served by uvicorn on a free 127.0.0.1 port inside the test's event loop (imported
as ``loopback``): ``async with served(app) as port: …``."""

from __future__ import annotations

import asyncio
import socket
from contextlib import asynccontextmanager
from typing import AsyncIterator


@asynccontextmanager
async def served(app, *, start_s: float = 10.0) -> AsyncIterator[int]:
    """Serve ``app``; yields the port once uvicorn is listening; stops it on exit.

    Raises:
        RuntimeError: uvicorn did not start within ``start_s`` seconds (its task's error, if any,
            is the cause)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + start_s
        while not server.started:
            if task.done() or loop.time() > deadline:
                raise RuntimeError("uvicorn did not start") from (task.exception() if task.done() else None)
            await asyncio.sleep(0.02)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await asyncio.gather(task, return_exceptions=True)
        sock.close()
