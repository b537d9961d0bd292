"""Any OpenAI-compatible streaming chat endpoint (vLLM, llama.cpp server, Ollama, hosted APIs).

No model ships with this adapter: the model, its license and its location are the server's.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator

from ..errors import ConfigError
from ..ports import ChatMessage, LLMDelta, LLMRequest, PortError, ServerTiming, ToolCall
from ._toolcall import check_tool_choice


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _ms(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


def read_server_timing(event: dict[str, Any], into: dict[str, Any]) -> None:
    """Collect what a response or stream chunk reports about the server's own work into
    ``into`` (:class:`~rejoinder.ports.ServerTiming` fields): OpenAI's ``usage``
    (``prompt_tokens``, ``completion_tokens``, ``prompt_tokens_details.cached_tokens``) and
    llama.cpp server's ``timings`` (``prompt_n``, ``prompt_ms``, ``predicted_n``,
    ``predicted_ms``, ``cache_n``), which win where both report. Malformed fields are ignored."""
    usage = event.get("usage")
    if isinstance(usage, dict):
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
        prompt = _count(usage.get("prompt_tokens"))
        if prompt is not None and "prompt_ms" not in into:  # llama.cpp's own counts stay
            into["prompt_tokens"] = prompt - min(prompt, cached or 0)
            if cached is not None:
                into["cached_tokens"] = cached
        if (gen := _count(usage.get("completion_tokens"))) is not None and "generated_ms" not in into:
            into["generated_tokens"] = gen
    timings = event.get("timings")
    if isinstance(timings, dict):
        for ours, theirs, read in (("prompt_tokens", "prompt_n", _count),
                                   ("prompt_ms", "prompt_ms", _ms),
                                   ("generated_tokens", "predicted_n", _count),
                                   ("generated_ms", "predicted_ms", _ms),
                                   ("cached_tokens", "cache_n", _count)):
            if (v := read(timings.get(theirs))) is not None:
                into[ours] = v


def _message(m: ChatMessage) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.name:
        d["name"] = m.name
    if m.tool_calls:
        d["tool_calls"] = [{"id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                           for c in m.tool_calls]
    if m.role == "tool" and m.tool_call_id:
        d["tool_call_id"] = m.tool_call_id
    return d


def _tool_choice(choice: str) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: str = ""

    def add(self, delta: dict[str, Any]) -> None:
        if delta.get("id") and not self.id:
            self.id = delta["id"]
        fn = delta.get("function") or {}
        name = fn.get("name")
        if name:  # OpenAI sends the name once; some servers repeat it in every delta
            self.name = name if not self.name or name.startswith(self.name) else self.name + name
        self.arguments += fn.get("arguments") or ""

    def done(self, url: str) -> ToolCall:
        if not self.name:
            raise PortError(f"{url} streamed a tool call without a function name")
        try:
            args = json.loads(self.arguments) if self.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise PortError(f"{url} sent malformed arguments JSON for tool {self.name!r}: "
                            f"{self.arguments[:200]!r} ({exc})") from exc
        if not isinstance(args, dict):
            raise PortError(f"{url} sent arguments for tool {self.name!r} that are not a JSON "
                            f"object: {self.arguments[:200]!r}")
        return ToolCall(self.id or f"call_{uuid.uuid4().hex[:16]}", self.name, args)


class OpenAICompatLLM:
    """Streaming client for ``POST {base_url}/chat/completions`` with ``stream: true`` (SSE).

    Yields ``choices[0].delta.content`` of each ``data:`` event until ``data: [DONE]``, and each
    streamed tool call as one :class:`~rejoinder.ports.ToolCall` once it is complete: ``tool_calls``
    deltas are accumulated by ``index`` (``id``, ``function.name``, ``function.arguments``
    fragments), and a call is complete when a later index starts, a ``finish_reason`` arrives or
    the stream ends.

    ``LLMRequest.tools`` are sent as ``tools: [{"type": "function", "function": {name,
    description, parameters}}]`` with ``tool_choice`` (``"auto"``/``"none"``/``"required"``, or
    ``{"type": "function", "function": {"name": …}}`` for one tool). Assistant messages carry
    their ``tool_calls`` (arguments as JSON text) and ``tool`` messages their ``tool_call_id``.

    ``LLMRequest.json_schema`` is sent as ``response_format: {"type": "json_schema", ...}``
    (OpenAI, vLLM, llama.cpp's llama-server, Ollama), or with ``schema_format="json_object"`` as
    ``{"type": "json_object", "schema": ...}`` (llama-cpp-python's ``llama_cpp.server``). ``LLMRequest.prefix`` is sent as a
    trailing assistant message: llama.cpp-based servers and vLLM (``continue_final_message``)
    may continue it, but many servers ignore it or start a new message — treat it as best effort.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (default ``$REJOINDER_LLM_BASE_URL``).
        model: model name sent to the server (default ``$REJOINDER_LLM_MODEL``, else "default").
        api_key: bearer token (default ``$REJOINDER_LLM_API_KEY``, then ``$OPENAI_API_KEY``;
            none is sent when empty).
        timeout_s: connect/read timeout in seconds (default 30).
        schema_format: "json_schema" (default) or "json_object" (see above).
        prompt_cache_key: send ``LLMRequest.cache_key`` as OpenAI's ``prompt_cache_key`` (default
            False: servers that validate the body strictly reject unknown fields).
        stream_tools: stream requests that carry tools (default True). False sends them with
            ``stream: false`` and yields the whole answer at once, for servers that cannot stream
            tool calls (llama-cpp-python's ``chatml-function-calling`` with ``tool_choice:
            "auto"``).
        client: an ``httpx.AsyncClient`` to reuse (its lifetime stays the caller's).
        stream_usage: ask a streamed answer for its token counts (``stream_options:
            {"include_usage": true}``: OpenAI, vLLM, llama.cpp, Ollama; default True). False
            for a server that rejects the field. What the server reports about its own work
            (that ``usage``, and llama.cpp server's ``timings`` with its prompt and generation
            times, sent unasked) is yielded last as one :class:`~rejoinder.ports.ServerTiming`;
            the adapter never measures time itself.
        allowed_tools: how ``LLMRequest.allowed_tools`` (a conversation step's tools) reaches the
            server. Every tool is always sent when the restriction fits ``tool_choice`` itself
            (a required call with one allowed tool is sent as that tool's name; no allowed tool
            as ``"none"``). Otherwise ``"filter"`` (default: vLLM, llama.cpp and Ollama have no
            other way) sends only the allowed tools, and ``"tool_choice"`` sends every tool with
            OpenAI's ``{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}``
            ``tool_choice`` (OpenAI's own API), so the prompt describes every tool.
        warm: :meth:`warmup` sends the system turn at start-up (default False: no request
            before the first call; ``serve --ray --models llm`` turns it on for its llama.cpp
            deployment).

    Raises:
        ConfigError: no base URL was given or found in the environment, a bad schema_format or
            allowed_tools.
    """

    provider = "openai"  # OpenTelemetry gen_ai.provider.name (the OpenAI-compatible protocol)

    def __init__(self, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, *, timeout_s: float = 30.0,
                 schema_format: str = "json_schema", prompt_cache_key: bool = False,
                 stream_tools: bool = True, client: Any = None,
                 allowed_tools: str = "filter", warm: bool = False,
                 stream_usage: bool = True) -> None:
        import httpx

        base = base_url or os.environ.get("REJOINDER_LLM_BASE_URL")
        if not base:
            raise ConfigError("OpenAI-compatible LLM needs a base URL: pass base_url "
                              "(e.g. http://127.0.0.1:8000/v1) or set REJOINDER_LLM_BASE_URL")
        if schema_format not in ("json_schema", "json_object"):
            raise ConfigError(f"schema_format must be 'json_schema' or 'json_object', "
                              f"not {schema_format!r}")
        if allowed_tools not in ("filter", "tool_choice"):
            raise ConfigError(f"allowed_tools must be 'filter' or 'tool_choice', not {allowed_tools!r}")
        self.allowed_tools = allowed_tools
        self.warm = warm
        self.stream_usage = stream_usage
        self.schema_format = schema_format
        self.prompt_cache_key = prompt_cache_key
        self.stream_tools = stream_tools
        self.base_url = base.rstrip("/")
        self.model_name = model or os.environ.get("REJOINDER_LLM_MODEL") or "default"
        key = api_key or os.environ.get("REJOINDER_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self._headers = {"Accept": "text/event-stream"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        # one pooled client: requests reuse kept-alive connections (a stream read to its end
        # returns its connection to the pool; one cut short by a barge-in is closed)
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16,
                                keepalive_expiry=60.0))
        self._owns_client = client is None

    def _streams(self, request: LLMRequest) -> bool:
        return self.stream_tools or not request.tools or request.tool_choice == "none"

    def payload(self, request: LLMRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (exposed for inspection and tests)."""
        messages = [_message(m) for m in request.messages]
        if request.prefix:
            messages.append({"role": "assistant", "content": request.prefix})
        body: dict[str, Any] = {
            "model": self.model_name, "messages": messages, "stream": self._streams(request),
            "max_tokens": request.max_tokens, "temperature": request.temperature,
        }
        if body["stream"] and self.stream_usage:
            body["stream_options"] = {"include_usage": True}
        if request.stop:
            body["stop"] = list(request.stop)
        if request.tools:
            sent, choice = self._tools_and_choice(request)
            body["tools"] = [{"type": "function",
                              "function": {"name": t.name, "description": t.description,
                                           "parameters": t.parameters}} for t in sent]
            body["tool_choice"] = choice
        if self.prompt_cache_key and request.cache_key:
            body["prompt_cache_key"] = request.cache_key
        if request.json_schema is not None and self.schema_format == "json_object":
            body["response_format"] = {"type": "json_object", "schema": request.json_schema}
        elif request.json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": request.json_schema, "strict": True},
            }
        return body

    def _tools_and_choice(self, request: LLMRequest) -> tuple[tuple[Any, ...], Any]:
        """The tools to send and the ``tool_choice``, honouring ``LLMRequest.allowed_tools``."""
        allowed = request.allowed_tools
        if allowed is None or request.tool_choice == "none":
            return request.tools, _tool_choice(request.tool_choice)
        if not allowed:  # nothing may be called: describe every tool, call none
            return request.tools, "none"
        if request.tool_choice not in ("auto", "required"):  # one named tool: already narrower
            return request.tools, _tool_choice(request.tool_choice)
        if request.tool_choice == "required" and len(allowed) == 1:  # every server knows this
            return request.tools, _tool_choice(allowed[0])
        if self.allowed_tools == "tool_choice":
            return request.tools, {"type": "allowed_tools", "allowed_tools": {
                "mode": request.tool_choice,
                "tools": [{"type": "function", "function": {"name": n}} for n in allowed]}}
        return request.callable_tools(), _tool_choice(request.tool_choice)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMDelta]:
        """Yield content deltas (``str``) as the server streams them, each tool call as one
        :class:`~rejoinder.ports.ToolCall` once complete, and last, when the server reported
        its own work (``usage``, ``timings``), one :class:`~rejoinder.ports.ServerTiming`.

        Raises:
            PortError: connection failure, HTTP status ≥ 400 (status and body excerpt in the
                message), a malformed event, a tool call with malformed arguments JSON (the
                message names the tool), a stream that ends before ``[DONE]`` or a finish
                reason, no tool call although ``tool_choice`` required one, or a
                ``tool_choice`` that names no declared tool (raised before sending).
        """
        import httpx

        check_tool_choice(request.tools, request.tool_choice)
        url = f"{self.base_url}/chat/completions"
        calls = 0
        try:
            async with self._client.stream("POST", url, json=self.payload(request),
                                           headers=self._headers) as resp:
                if resp.status_code >= 400:
                    body = (await resp.aread()).decode("utf-8", "replace")
                    hint = (" (OpenAICompatLLM(stream_usage=False) leaves stream_options out)"
                            if "stream_options" in body else "")
                    raise PortError(f"{url} answered HTTP {resp.status_code}: {body[:300]}{hint}")
                if self._streams(request):
                    async for delta in self._sse(url, resp):
                        calls += isinstance(delta, ToolCall)
                        yield delta
                else:
                    for delta in self._whole(url, json.loads(await resp.aread())):
                        calls += isinstance(delta, ToolCall)
                        yield delta
        except httpx.HTTPError as exc:
            raise PortError(f"{url}: {type(exc).__name__}: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise PortError(f"{url} sent a malformed response: {exc}") from exc
        if request.tools and request.tool_choice not in ("auto", "none") and not calls:
            raise PortError(f"{url} returned no tool call although tool_choice was "
                            f"{request.tool_choice!r}; does the server support tools?")

    @staticmethod
    async def _sse(url: str, resp: Any) -> AsyncIterator[LLMDelta]:
        pending: dict[int, _PendingCall] = {}
        finished = False
        timing: dict[str, Any] = {}
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":  # read on to the end of the body (nothing should follow), so
                finished = True   # the connection goes back to the pool instead of being closed
                continue
            if not data:
                continue
            try:
                event = json.loads(data)
            except json.JSONDecodeError as exc:
                raise PortError(f"{url} sent a malformed event: {data[:200]}") from exc
            if "error" in event:
                raise PortError(f"{url} reported an error: {str(event['error'])[:300]}")
            read_server_timing(event, timing)  # the last chunk(s): usage, llama.cpp's timings
            choices = event.get("choices") or []
            if not choices:
                continue
            delta = choices[0].get("delta") or {}
            if delta.get("content"):
                yield delta["content"]
            for tc in delta.get("tool_calls") or ():
                index = int(tc.get("index", 0))
                for earlier in sorted(i for i in pending if i < index):
                    yield pending.pop(earlier).done(url)
                pending.setdefault(index, _PendingCall()).add(tc)
            if choices[0].get("finish_reason"):
                finished = True
                for i in sorted(pending):
                    yield pending.pop(i).done(url)
        if not finished:
            raise PortError(f"{url} ended the stream before [DONE] or a finish reason")
        for i in sorted(pending):
            yield pending.pop(i).done(url)
        if timing:
            yield ServerTiming(**timing)

    @staticmethod
    def _whole(url: str, body: dict[str, Any]) -> list[LLMDelta]:
        if "error" in body:
            raise PortError(f"{url} reported an error: {str(body['error'])[:300]}")
        choices = body.get("choices") or []
        msg = (choices[0].get("message") or {}) if choices else {}
        out: list[LLMDelta] = [msg["content"]] if msg.get("content") else []
        for tc in msg.get("tool_calls") or ():
            call = _PendingCall()
            fn = tc.get("function") or {}
            args = fn.get("arguments")
            call.add({"id": tc.get("id"), "function": {
                "name": fn.get("name"),
                "arguments": args if isinstance(args, str) or args is None else json.dumps(args)}})
            out.append(call.done(url))
        timing: dict[str, Any] = {}
        read_server_timing(body, timing)
        if timing:
            out.append(ServerTiming(**timing))
        return out

    def warmup(self, system_prompt: str | None = None, tools: Any = (), cache_key: str | None = None) -> int:
        """With ``warm=True``: send the system turn once (``max_tokens`` 1, not streamed;
        blocking — the runtime calls it off the event loop) so a server that keeps its last
        prompt's KV prefix (llama.cpp's) prefills the instructions and tools now and the first
        caller turn pays only for its own tokens. Returns the prompt tokens the server reports;
        0 without ``warm``, when it reports none, or when the request failed (best effort: the
        first request then pays)."""
        if not self.warm:
            return 0
        import httpx

        body = self.payload(LLMRequest((ChatMessage("system", system_prompt or ""),), tools=tuple(tools),
                                       max_tokens=1, temperature=0.0))
        body["stream"] = False
        body.pop("stream_options", None)  # only allowed on a streamed request
        headers = {k: v for k, v in self._headers.items() if k != "Accept"}
        try:
            resp = httpx.post(f"{self.base_url}/chat/completions", json=body, headers=headers, timeout=120.0)
            if resp.status_code >= 400:
                return 0
            return int((resp.json().get("usage") or {}).get("prompt_tokens") or 0)
        except (httpx.HTTPError, ValueError, AttributeError):
            return 0

    async def aclose(self) -> None:
        """Close the HTTP client if this instance created it."""
        if self._owns_client:
            await self._client.aclose()
