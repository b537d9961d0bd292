"""What an OpenAI-compatible server reports about its own work reaches the turn's record:
OpenAI-style ``usage`` from a real HTTP server on loopback, and llama.cpp-style ``timings`` from
rejoinder's llama.cpp server (SmolLM2 on loopback), through the runtime's timing wrapper into
``TurnRecord.llm_server``. The adapter never measures time itself."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from rejoinder.adapters.openai_llm import OpenAICompatLLM
from rejoinder.clock import RealClock
from rejoinder.events import EventBus
from rejoinder.ports import ChatMessage, LLMRequest, PortError, ServerTiming
from rejoinder.stages import Stamper, timed_llm
from rejoinder.timeline import Timeline

from loopback import served

REQUEST = LLMRequest((ChatMessage("user", "hi"),), max_tokens=8)


def _usage_app(bodies: list[dict]) -> Starlette:
    """Streams like OpenAI and vLLM with ``include_usage``: the usage in a last chunk with no
    choices, after the finish reason."""
    async def chat(request):
        body = await request.json()
        bodies.append(body)

        async def events():
            for tok in ("Hi", " there", "."):
                yield f"data: {json.dumps({'choices': [{'delta': {'content': tok}}]})}\n\n"
            yield f"data: {json.dumps({'choices': [{'delta': {}, 'finish_reason': 'stop'}]})}\n\n"
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                         "prompt_tokens_details": {"cached_tokens": 8}}
                yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")
    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


async def test_usage_in_a_last_chunk_is_yielded_last_and_only_when_asked_for():
    bodies: list[dict] = []
    async with served(_usage_app(bodies)) as port:
        llm = OpenAICompatLLM(f"http://127.0.0.1:{port}/v1", "m")
        out = [d async for d in llm.stream(REQUEST)]
        assert bodies[-1]["stream_options"] == {"include_usage": True}
        # 12 prompt tokens of which 8 came from the server's cache: 4 evaluated; no times
        assert out == ["Hi", " there", ".",
                       ServerTiming(prompt_tokens=4, generated_tokens=3, cached_tokens=8)]
        await llm.aclose()
        quiet = OpenAICompatLLM(f"http://127.0.0.1:{port}/v1", "m", stream_usage=False)
        assert [d async for d in quiet.stream(REQUEST)] == ["Hi", " there", "."]
        assert "stream_options" not in bodies[-1]
        await quiet.aclose()


async def test_a_server_rejecting_stream_options_is_told_how_to_leave_them_out():
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": "Unrecognized request argument: stream_options"})

    llm = OpenAICompatLLM("http://llm.test/v1", "m",
                          client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    with pytest.raises(PortError, match=r"HTTP 400.*stream_usage=False"):
        [d async for d in llm.stream(REQUEST)]


# --- llama.cpp-style timings from rejoinder's own server ----------------------------------------
def _ask(nonce: str) -> LLMRequest:
    return LLMRequest((ChatMessage("system", f"You are a concise assistant ({nonce})."),
                       ChatMessage("user", "What is the capital of France?")),
                      max_tokens=12, temperature=0.0)


async def test_llama_server_timings_reach_the_turn_record(llama_server):
    bus = EventBus()
    tl = Timeline()
    bus.subscribe(tl)
    st = Stamper("c1", RealClock(), bus)
    llm = OpenAICompatLLM(llama_server, "smollm2")
    request = _ask(uuid.uuid4().hex)  # a prompt the server has not cached
    # straight from the adapter: the server's report comes last, after the text
    out = [d async for d in llm.stream(request)]
    *text, first = out
    assert text and all(isinstance(d, str) for d in text)
    assert isinstance(first, ServerTiming)
    assert first.prompt_tokens > 20 and first.prompt_ms > 0  # the new system prompt was evaluated
    assert first.generated_ms > 0 and len(text) - 1 <= first.generated_tokens <= len(text) + 1
    # the same prompt again, through the runtime's timing wrapper: its KV prefix is reused
    said = [d async for d in timed_llm(st, 3, llm, request)]
    assert said and all(isinstance(d, str) for d in said)  # recorded, not passed on to be spoken
    [end] = [e for e in tl.records() if e.turn_id == 3]
    again = dict(end.llm_server)
    assert again["requests"] == 1
    assert again["cached_tokens"] > first.cached_tokens
    assert again.get("prompt_tokens", 0) < first.prompt_tokens
    # a second request of the same turn adds up
    said = [d async for d in timed_llm(st, 3, llm, _ask(uuid.uuid4().hex))]
    rec = tl.records()[0]
    assert rec.llm_server["requests"] == 2 and rec.llm_requests == 2
    assert rec.llm_server["generated_tokens"] >= again["generated_tokens"] + len(said) - 1
    assert rec.summary()["llm_server"] == rec.llm_server
    await llm.aclose()


def test_a_level_adds_up_what_the_server_reported_and_its_speeds():
    from rejoinder.harness.summary import llm_server_summary
    from rejoinder.timeline import sum_reported

    turns = [{"llm_server": {"requests": 2, "prompt_tokens": 300, "prompt_ms": 150.0,
                             "generated_tokens": 40, "generated_ms": 800.0, "cached_tokens": 50}},
             {"llm_server": {}}, {}]
    call = sum_reported(t.get("llm_server") for t in turns)
    assert call == turns[0]["llm_server"]
    calls = [{"extra": {"llm_server": call}},
             {"extra": {"llm_server": {"requests": 1, "prompt_tokens": 100, "prompt_ms": 50.0,
                                       "generated_tokens": 10, "generated_ms": 200.0}}},
             {"extra": {}}]
    assert llm_server_summary(calls) == {
        "requests": 3, "prompt_tokens": 400, "prompt_ms": 200.0, "generated_tokens": 50,
        "generated_ms": 1000.0, "cached_tokens": 50,
        "prompt_tokens_per_s": 2000.0, "generated_tokens_per_s": 50.0}
    assert llm_server_summary([{"extra": {}}]) is None  # an in-process LLM reports nothing
