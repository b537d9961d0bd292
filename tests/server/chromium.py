"""Drive Debian's headless Chromium over the DevTools protocol (CDP) with the ``websockets``
library: launch with a fake microphone fed from a WAV, evaluate JS, take screenshots."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import websockets

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def chromium_available() -> bool:
    return Path(CHROMIUM).exists()


class Chromium:
    """One headless Chromium process whose microphone plays ``wav`` (once, then silence)."""

    def __init__(self, url: str, wav: Path, *, loop_audio: bool = False) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="rejoinder-chromium-"))
        fake = str(wav) + ("" if loop_audio else "%noloop")
        self.args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--no-first-run", "--no-default-browser-check", f"--user-data-dir={self.profile}",
                     "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                     f"--use-file-for-fake-audio-capture={fake}", "--autoplay-policy=no-user-gesture-required",
                     "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                     "--window-size=1280,900", url]
        self.proc: subprocess.Popen | None = None
        self._ids = itertools.count(1)
        self.console: list[str] = []

    async def __aenter__(self) -> "Chromium":
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not start: " + (self.proc.stderr.read(2000).decode()
                                                                 if self.proc.poll() is not None else "timeout"))
            await asyncio.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        async with httpx.AsyncClient() as client:
            for _ in range(100):
                targets = (await client.get(f"http://127.0.0.1:{port}/json/list")).json()
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    break
                await asyncio.sleep(0.05)
        self.ws = await websockets.connect(pages[0]["webSocketDebuggerUrl"], max_size=1 << 26)
        await self.call("Runtime.enable")
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            await self.ws.close()
        except Exception:
            pass
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    async def call(self, method: str, **params):
        mid = next(self._ids)
        await self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if msg.get("method") == "Runtime.consoleAPICalled":
                args = msg["params"].get("args", [])
                self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
            elif msg.get("method") == "Runtime.exceptionThrown":
                self.console.append("EXCEPTION " + json.dumps(msg["params"]["exceptionDetails"])[:500])

    async def js(self, expression: str):
        res = await self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                              awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"JS error: {res['exceptionDetails']}")
        return res["result"].get("value")

    async def screenshot(self, path: Path) -> bytes:
        res = await self.call("Page.captureScreenshot", format="png")
        data = base64.b64decode(res["data"])
        path.write_bytes(data)
        return data


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG header; raises AssertionError for anything but a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


# Counts the pixels of each waterfall colour in a PNG (decoded by the browser itself).
COUNT_COLOURS_JS = """
(async (b64, colours) => {
  const img = new Image();
  img.src = "data:image/png;base64," + b64;
  await img.decode();
  const c = new OffscreenCanvas(img.width, img.height);
  const g = c.getContext("2d");
  g.drawImage(img, 0, 0);
  const px = g.getImageData(0, 0, img.width, img.height).data;
  const out = {};
  for (const [name, [r, gg, b]] of Object.entries(colours)) {
    let n = 0;
    for (let i = 0; i < px.length; i += 4)
      if (Math.abs(px[i] - r) < 6 && Math.abs(px[i + 1] - gg) < 6 && Math.abs(px[i + 2] - b) < 6) n++;
    out[name] = n;
  }
  return out;
})
"""
