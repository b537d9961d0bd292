"""Any OpenAI-compatible streaming chat endpoint (vLLM, llama.cpp server, Ollama, hosted APIs).

No model ships with this adapter: the model, its license and its location are the server's.
"""

from __future__ import annotations

import json
import os
from typing import Any, AsyncIterator

from ..errors import ConfigError
from ..ports import ChatMessage, LLMRequest, PortError


def _message(m: ChatMessage) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.name:
        d["name"] = m.name
    return d


class OpenAICompatLLM:
    """Streaming client for ``POST {base_url}/chat/completions`` with ``stream: true`` (SSE).

    Yields ``choices[0].delta.content`` of each ``data:`` event until ``data: [DONE]``.

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
        client: an ``httpx.AsyncClient`` to reuse (its lifetime stays the caller's).

    Raises:
        ConfigError: no base URL was given or found in the environment, or a bad schema_format.
    """

    provider = "openai"  # OpenTelemetry gen_ai.provider.name (the OpenAI-compatible protocol)

    def __init__(self, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, *, timeout_s: float = 30.0,
                 schema_format: str = "json_schema", client: Any = None) -> None:
        import httpx

        base = base_url or os.environ.get("REJOINDER_LLM_BASE_URL")
        if not base:
            raise ConfigError("OpenAI-compatible LLM needs a base URL: pass base_url "
                              "(e.g. http://127.0.0.1:8000/v1) or set REJOINDER_LLM_BASE_URL")
        if schema_format not in ("json_schema", "json_object"):
            raise ConfigError(f"schema_format must be 'json_schema' or 'json_object', "
                              f"not {schema_format!r}")
        self.schema_format = schema_format
        self.base_url = base.rstrip("/")
        self.model_name = model or os.environ.get("REJOINDER_LLM_MODEL") or "default"
        key = api_key or os.environ.get("REJOINDER_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self._headers = {"Accept": "text/event-stream"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._client = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout_s))
        self._owns_client = client is None

    def payload(self, request: LLMRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (exposed for inspection and tests)."""
        messages = [_message(m) for m in request.messages]
        if request.prefix:
            messages.append({"role": "assistant", "content": request.prefix})
        body: dict[str, Any] = {
            "model": self.model_name, "messages": messages, "stream": True,
            "max_tokens": request.max_tokens, "temperature": request.temperature,
        }
        if request.stop:
            body["stop"] = list(request.stop)
        if request.json_schema is not None and self.schema_format == "json_object":
            body["response_format"] = {"type": "json_object", "schema": request.json_schema}
        elif request.json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": request.json_schema, "strict": True},
            }
        return body

    async def stream(self, request: LLMRequest) -> AsyncIterator[str]:
        """Yield content deltas as the server streams them.

        Raises:
            PortError: connection failure, HTTP status ≥ 400 (status and body excerpt in the
                message), or a malformed event.
        """
        import httpx

        url = f"{self.base_url}/chat/completions"
        try:
            async with self._client.stream("POST", url, json=self.payload(request),
                                           headers=self._headers) as resp:
                if resp.status_code >= 400:
                    body = (await resp.aread()).decode("utf-8", "replace")
                    raise PortError(f"{url} answered HTTP {resp.status_code}: {body[:300]}")
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    if not data:
                        continue
                    try:
                        event = json.loads(data)
                    except json.JSONDecodeError as exc:
                        raise PortError(f"{url} sent a malformed event: {data[:200]}") from exc
                    if "error" in event:
                        raise PortError(f"{url} reported an error: {str(event['error'])[:300]}")
                    choices = event.get("choices") or []
                    if not choices:
                        continue
                    content = (choices[0].get("delta") or {}).get("content")
                    if content:
                        yield content
        except httpx.HTTPError as exc:
            raise PortError(f"{url}: {type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        """Close the HTTP client if this instance created it."""
        if self._owns_client:
            await self._client.aclose()
