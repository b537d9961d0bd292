"""OpenAI-compatible adapter: tool-call wire format (httpx MockTransport for exact server
behaviours) and llama-cpp-python's own ``chatml-function-calling`` handler on a real server."""

from __future__ import annotations

import json

import httpx
import pytest

from rejoinder.adapters.openai_llm import OpenAICompatLLM
from rejoinder.ports import ChatMessage, LLMRequest, PortError, ServerTiming, ToolCall, ToolSchema

ORDER = ToolSchema("lookup_order", "Look up an order.",
                   {"type": "object", "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"]})
LIST = ToolSchema("list_appointments", "List appointments.", {"type": "object", "properties": {}})
ASK = (ChatMessage("system", "Be brief."), ChatMessage("user", "Check order 4217 and my bookings."))


def _sse(*events: dict | str) -> bytes:
    out = []
    for e in events:
        out.append("data: " + (e if isinstance(e, str) else json.dumps(e)) + "\n\n")
    return "".join(out).encode()


def _delta(delta: dict, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _client(body: bytes, seen: list | None = None, status: int = 200) -> OpenAICompatLLM:
    def handler(req: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(json.loads(req.content))
        return httpx.Response(status, content=body,
                              headers={"content-type": "text/event-stream"})

    return OpenAICompatLLM("http://llm.test/v1", "m",
                           client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


def test_payload_tools_choice_history_and_cache_key():
    call = ToolCall("call_1", "lookup_order", {"order_id": "4217"})
    msgs = ASK + (ChatMessage("assistant", "", tool_calls=(call,)),
                  ChatMessage("tool", '{"status": "shipped"}', tool_call_id="call_1"))
    llm = OpenAICompatLLM("http://h/v1", "m")
    body = llm.payload(LLMRequest(msgs, tools=(ORDER, LIST), tool_choice="lookup_order",
                                  cache_key="call-7"))
    assert body["tools"][0] == {"type": "function", "function": {
        "name": "lookup_order", "description": "Look up an order.",
        "parameters": ORDER.parameters}}
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup_order"}}
    assert body["messages"][2] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "lookup_order", "arguments": '{"order_id": "4217"}'}}]}
    assert body["messages"][3] == {"role": "tool", "content": '{"status": "shipped"}',
                                   "tool_call_id": "call_1"}
    assert "prompt_cache_key" not in body  # off by default: strict servers reject unknown fields
    for choice in ("auto", "none", "required"):
        assert llm.payload(LLMRequest(ASK, tools=(ORDER,), tool_choice=choice))["tool_choice"] \
            == choice
    assert "tools" not in llm.payload(LLMRequest(ASK))
    keyed = OpenAICompatLLM("http://h/v1", "m", prompt_cache_key=True)
    assert keyed.payload(LLMRequest(ASK, cache_key="call-7"))["prompt_cache_key"] == "call-7"
    assert "prompt_cache_key" not in keyed.payload(LLMRequest(ASK))


async def test_streamed_tool_call_fragments_are_accumulated_by_index():
    body = _sse(
        _delta({"role": "assistant", "content": "One moment. "}),
        _delta({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                "function": {"name": "lookup_order", "arguments": ""}}]}),
        _delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"order_'}}]}),
        _delta({"tool_calls": [{"index": 0, "function": {"arguments": 'id": "4217"}'}}]}),
        # a second call; this server repeats the name in every delta (llama-cpp-python does)
        _delta({"tool_calls": [{"index": 1, "id": "call_b",
                                "function": {"name": "list_appointments", "arguments": "{"}}]}),
        _delta({"tool_calls": [{"index": 1, "function": {"name": "list_appointments",
                                                         "arguments": "}"}}]}),
        _delta({}, "tool_calls"), "[DONE]")
    seen: list = []
    llm = _client(body, seen)
    out = [d async for d in llm.stream(LLMRequest(ASK, tools=(ORDER, LIST)))]
    assert out == ["One moment. ", ToolCall("call_a", "lookup_order", {"order_id": "4217"}),
                   ToolCall("call_b", "list_appointments", {})]
    assert seen[0]["stream"] is True and seen[0]["tool_choice"] == "auto"


async def test_call_without_id_and_stream_ending_at_finish_reason():
    body = _sse(_delta({"tool_calls": [{"index": 0, "function": {
        "name": "lookup_order", "arguments": '{"order_id": "1"}'}}]}), _delta({}, "tool_calls"))
    out = [d async for d in _client(body).stream(LLMRequest(ASK, tools=(ORDER,)))]
    assert len(out) == 1 and out[0].name == "lookup_order" and out[0].id.startswith("call_")


async def test_malformed_arguments_name_the_tool():
    body = _sse(_delta({"tool_calls": [{"index": 0, "id": "c", "function": {
        "name": "lookup_order", "arguments": '{"order_id": 42'}}]}), _delta({}, "tool_calls"),
        "[DONE]")
    with pytest.raises(PortError, match="malformed arguments JSON for tool 'lookup_order'"):
        [d async for d in _client(body).stream(LLMRequest(ASK, tools=(ORDER,)))]


async def test_stream_cut_before_done_is_an_error():
    body = _sse(_delta({"content": "Your order"}))
    with pytest.raises(PortError, match="ended the stream before"):
        [d async for d in _client(body).stream(LLMRequest(ASK))]


async def test_required_choice_without_a_call_is_an_error():
    body = _sse(_delta({"content": "I cannot call tools."}, "stop"), "[DONE]")
    with pytest.raises(PortError, match="no tool call although tool_choice was 'required'"):
        [d async for d in _client(body).stream(LLMRequest(ASK, tools=(ORDER,),
                                                          tool_choice="required"))]


async def test_stream_tools_false_parses_a_whole_response():
    whole = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call_z", "type": "function",
             "function": {"name": "lookup_order", "arguments": '{"order_id": "4217"}'}}]}}]}
    seen: list = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(json.loads(req.content))
        return httpx.Response(200, json=whole)

    llm = OpenAICompatLLM("http://llm.test/v1", "m", stream_tools=False,
                          client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    out = [d async for d in llm.stream(LLMRequest(ASK, tools=(ORDER,)))]
    assert out == [ToolCall("call_z", "lookup_order", {"order_id": "4217"})]
    assert seen[0]["stream"] is False
    assert llm.payload(LLMRequest(ASK, tools=(ORDER,), tool_choice="none"))["stream"] is True


def test_llama_server_command_and_defaults(monkeypatch):
    from rejoinder.adapters import llama_server as ls
    from rejoinder.adapters.llama_llm import smollm2_model_path

    cmd = ls.command(8123, tool_mode="eager")
    assert cmd[1:3] == ["-m", "rejoinder.adapters.llama_server"]
    assert cmd[cmd.index("--model") + 1] == str(smollm2_model_path())
    assert cmd[cmd.index("--port") + 1] == "8123" and cmd[-2:] == ["--tool_mode", "eager"]
    assert "--tool_mode" not in ls.command(8123, chat_format="chatml")
    monkeypatch.delenv("MODEL", raising=False)
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    args = ls.with_defaults(["--port", "9000", "--n_ctx=8192"])
    assert args[args.index("--chat_format") + 1] == "rejoinder-tools"
    assert args.count("--n_ctx") == 0 and "--n_ctx=8192" in args  # given ones are kept
    assert args[args.index("--model") + 1] == str(smollm2_model_path())
    assert ls.with_defaults(["--config_file", "c.yaml"]) == ["--config_file", "c.yaml"]


def test_server_handler_request_mapping():
    from rejoinder.adapters.llama_server import to_request

    req = to_request(
        [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text",
                                                                          "text": "hi"}]},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "c1", "type": "function",
              "function": {"name": "lookup_order", "arguments": '{"order_id": "1"}'}}]},
         {"role": "tool", "content": "{}", "tool_call_id": "c1"},
         {"role": "assistant", "content": "Your order"}],
        [{"type": "function", "function": {"name": "lookup_order",
                                           "parameters": ORDER.parameters}}],
        {"type": "function", "function": {"name": "lookup_order"}}, max_tokens=None, stop="\n",
        response_format={"type": "json_object", "schema": {"type": "object"}})
    assert req.tool_choice == "lookup_order" and req.tools[0].name == "lookup_order"
    assert req.messages[1].content == "hi" and req.messages[2].tool_calls[0].arguments == \
        {"order_id": "1"}
    assert req.prefix == "Your order" and len(req.messages) == 4
    assert req.stop == ("\n",) and req.json_schema == {"type": "object"} and req.max_tokens == 256
    with pytest.raises(PortError, match="'lookup_order' in the history has malformed"):
        to_request([{"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "function": {"name": "lookup_order", "arguments": "{"}}]}])


# ------------------------------------------------------------ llama-cpp-python's own handler
@pytest.fixture(scope="module")
def chatml_fc_server(tmp_path_factory):
    """llama_cpp.server with llama-cpp-python's ``chatml-function-calling`` chat format."""
    pytest.importorskip("sse_starlette", reason="llama_cpp.server needs sse-starlette")
    from rejoinder.adapters import llama_server

    server = llama_server.start(chat_format="chatml-function-calling", n_ctx=2048,
                                log_path=tmp_path_factory.mktemp("fc") / "server.log")
    yield server
    server.stop()


async def test_chatml_function_calling_streams_a_named_call(chatml_fc_server):
    """Its streamed call arrives as real fragmented ``tool_calls`` deltas; ``auto`` with
    ``stream: true`` is not supported there (it raises once the model picks a function, the
    stream ends without [DONE]), which ``stream_tools=False`` works around."""
    llm = OpenAICompatLLM(chatml_fc_server.base_url, "smollm2", timeout_s=300)
    req = LLMRequest(ASK, tools=(ORDER, LIST), tool_choice="lookup_order", temperature=0.0,
                     max_tokens=40)
    out = [d async for d in llm.stream(req)]
    calls = [d for d in out if isinstance(d, ToolCall)]
    assert len(calls) == 1 and calls[0].name == "lookup_order"
    assert isinstance(calls[0].arguments.get("order_id"), str)
    await llm.aclose()
    whole = OpenAICompatLLM(chatml_fc_server.base_url, "smollm2", stream_tools=False,
                            timeout_s=300)
    out = [d async for d in whole.stream(LLMRequest(ASK, tools=(ORDER, LIST), temperature=0.0,
                                                    max_tokens=40))]
    said = [d for d in out if not isinstance(d, ServerTiming)]  # its usage may come last
    assert said and all(isinstance(d, (str, ToolCall)) for d in said)
    assert not any(isinstance(d, ServerTiming) for d in out[:-1])
    await whole.aclose()
