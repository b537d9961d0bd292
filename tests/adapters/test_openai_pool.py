"""The OpenAI-compatible adapter is a real pooled client: requests that read their stream to the
end share one kept-alive connection (a real HTTP server on loopback counts connections)."""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from rejoinder.adapters.openai_llm import OpenAICompatLLM
from rejoinder.ports import ChatMessage, LLMRequest

from loopback import served

REQUEST = LLMRequest((ChatMessage("user", "hi"),), max_tokens=8)


def _app(peers: list[int]) -> Starlette:
    async def chat(request):
        peers.append(request.client[1])  # the client's port: one per TCP connection

        async def events():
            for tok in ("Hi", " there", "."):
                yield f"data: {json.dumps({'choices': [{'delta': {'content': tok}}]})}\n\n"
            yield f"data: {json.dumps({'choices': [{'delta': {}, 'finish_reason': 'stop'}]})}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")
    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


async def test_requests_reuse_one_connection_and_a_cut_stream_only_closes_its_own():
    peers: list[int] = []
    async with served(_app(peers)) as port:
        llm = OpenAICompatLLM(f"http://127.0.0.1:{port}/v1", "m")
        for _ in range(3):
            assert [d async for d in llm.stream(REQUEST)] == ["Hi", " there", "."]
        assert len(peers) == 3 and len(set(peers)) == 1  # one connection, kept alive
        cut = llm.stream(REQUEST)  # a barge-in: the consumer stops after the first token
        async for _ in cut:
            break
        await cut.aclose()
        assert [d async for d in llm.stream(REQUEST)] == ["Hi", " there", "."]
        assert len(set(peers)) == 2  # only the cut stream's connection was replaced
        await llm.aclose()
