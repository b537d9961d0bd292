"""Chat and tool-call formats read from GGUF metadata (rejoinder.adapters._chatformat): detection,
rendering, parsing and the template sandbox, on the bundled SmolLM2 GGUF and on small GGUF files
written here (metadata only, no weights; the templates below are this test's own)."""

from __future__ import annotations

import pytest

from rejoinder.adapters._chatformat import (FORMATS, detect_format, format_for, make_format,
                                            newline_safe, read_gguf_metadata)
from rejoinder.adapters._toolcall import render_prompt
from rejoinder.errors import ConfigError
from rejoinder.ports import ChatMessage, PortError, ToolCall

from tool_cases import SUPPORT, TOOLS, assert_valid_call

#: ChatML with Hermes-style calls, written for this test (Qwen2.5's template has the same shape)
HERMES = newline_safe(
    "{% if messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}"
    "{% if tools %}\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>{% endif %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
    "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% elif m.tool_calls %}<|im_start|>assistant{% if m.content %}\n{{ m.content }}{% endif %}"
    "{% for c in m.tool_calls %}\n<tool_call>\n{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

#: Llama 3.1-style headers with JSON calls, written for this test
LLAMA3 = newline_safe(
    "{{ bos_token }}{% for m in messages %}"
    "{% if m.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>\n\n{{ m.content }}"
    "{% elif m.tool_calls %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{\"name\": \"{{ m.tool_calls[0].function.name }}\", \"parameters\": "
    "{{ m.tool_calls[0].function.arguments | tojson }}}"
    "{% else %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}"
    "{% if loop.first and tools %}\nFunctions:{% for t in tools %}\n{{ t | tojson }}{% endfor %}"
    "{% endif %}{% endif %}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")

CALL = ToolCall("call_1", "lookup_order", {"order_id": "4217"})
TURNS = [SUPPORT, ChatMessage("assistant", "Hi, how can I help?"),
         ChatMessage("user", "Where is order 4217?")]


def write_gguf(path, template: str | None, name: str = "Test Model", arch: str = "llama"):
    """A metadata-only GGUF (no tensors) written with the ``gguf`` package."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    if template is not None:
        w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_bundled_smollm2_gguf_is_smollm2s_own_format_unchanged():
    from rejoinder.adapters.llama_llm import smollm2_model_path

    meta = read_gguf_metadata(smollm2_model_path())
    assert meta["general.architecture"] == "llama"
    assert "<|im_start|>" in meta["tokenizer.chat_template"]
    fmt = format_for(meta)
    assert (fmt.name, fmt.call_open, fmt.call_close, fmt.name_prefix, fmt.empty_call) == \
        ("smollm2", "<tool_call>", "</tool_call>", '[{"name": "', True)
    msgs = TURNS + [ChatMessage("assistant", "", tool_calls=(CALL,)),
                    ChatMessage("tool", '{"status": "shipped"}', tool_call_id="call_1")]
    assert fmt.render(msgs, TOOLS) == render_prompt(msgs, TOOLS)  # today's rendering, byte for byte


def test_the_loaded_model_reports_its_format(llama_llm):
    assert llama_llm.format.name == "smollm2"
    assert llama_llm.engine.format is llama_llm.format


@pytest.mark.parametrize("template,name", [(HERMES, "hermes"), (LLAMA3, "llama3")])
def test_formats_are_detected_from_a_gguf_written_here(tmp_path, template, name):
    path = write_gguf(tmp_path / f"{name}.gguf", template)
    meta = read_gguf_metadata(path)
    assert meta["tokenizer.chat_template"] == template and meta["general.name"] == "Test Model"
    fmt = format_for(meta)
    assert fmt.name == name and fmt.template == template


def test_detection_rules_on_metadata():
    assert detect_format({"tokenizer.chat_template": "<|im_start|>{{ x }}"}) == "smollm2"
    assert detect_format({"general.name": "SmolLM2 360M Instruct"}) == "smollm2"
    with pytest.raises(ConfigError, match=r"no tokenizer.chat_template.*llama.chat_format"):
        detect_format({"general.name": "Mystery 7B", "general.architecture": "mystery"}, "m.gguf")
    with pytest.raises(ConfigError, match="no known family"):
        detect_format({"tokenizer.chat_template": "[INST] {{ m }} [/INST]"})
    # a named format overrides detection; another family's template is then not used
    fmt = format_for({"tokenizer.chat_template": HERMES}, "llama3")
    assert fmt.name == "llama3" and "<|start_header_id|>" in fmt.template
    with pytest.raises(ConfigError, match="unknown chat format"):
        make_format("vicuna")
    assert set(FORMATS) == {"smollm2", "hermes", "llama3"}


def test_hermes_renders_tools_calls_and_results(tmp_path):
    fmt = format_for(read_gguf_metadata(write_gguf(tmp_path / "h.gguf", HERMES)))
    assert (fmt.call_open, fmt.call_close, fmt.name_prefix, fmt.empty_call) == \
        ("<tool_call>", "</tool_call>", '\n{"name": "', False)
    msgs = TURNS + [ChatMessage("assistant", "", tool_calls=(CALL,)),
                    ChatMessage("tool", '{"status": "shipped"}', tool_call_id="call_1")]
    p = fmt.render(msgs, TOOLS)
    assert p.startswith(f"<|im_start|>system\n{SUPPORT.content}\n<tools>\n"
                        '{"type": "function", "function": {"name": "lookup_order"')
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "lookup_order", "arguments": '
            '{"order_id": "4217"}}\n</tool_call><|im_end|>\n') in p
    assert p.endswith('<|im_start|>user\n<tool_response>\n{"status": "shipped"}\n'
                      '</tool_response><|im_end|>\n<|im_start|>assistant\n')
    assert "title" not in p  # schemas are cleaned as in the smollm2 format


@pytest.mark.parametrize("template,name", [(None, "smollm2"), (HERMES, "hermes"),
                                           (LLAMA3, "llama3"), (None, "hermes"), (None, "llama3")])
def test_the_written_call_is_what_the_history_renders(template, name):
    """The engine writes ``call_open`` + :meth:`call_text` after the prompt; the next request's
    prompt renders that call identically, so the KV cache's tokens stay a prefix (append-only)."""
    fmt = make_format(name, template)
    before = fmt.render(TURNS, TOOLS)
    after = fmt.render(TURNS + [ChatMessage("assistant", "", tool_calls=(CALL,)),
                                ChatMessage("tool", '{"status": "shipped"}',
                                            tool_call_id="call_1")], TOOLS)
    assert after.startswith(before + fmt.call_open + fmt.call_text(CALL))
    assert fmt.call_text(CALL).startswith(fmt.name_prefix + "lookup_order")
    assert before.startswith(fmt.system_prefix(SUPPORT.content, TOOLS))  # warm-up prefix


def test_llama3_renders_and_parses_json_calls(tmp_path):
    fmt = format_for(read_gguf_metadata(write_gguf(tmp_path / "l.gguf", LLAMA3)),
                     bos_token="<|begin_of_text|>")
    assert (fmt.call_open, fmt.call_close, fmt.name_prefix, fmt.args_key) == \
        ('{"name": "', "", "", "parameters")
    p = fmt.render(TURNS, TOOLS)
    assert p.startswith("<|start_header_id|>system<|end_header_id|>\n\n")  # BOS is the tokenizer's
    assert p.endswith("Where is order 4217?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    calls = fmt.parse('lookup_order", "parameters": {"order_id": "4217"}}', TOOLS)
    assert [(c.name, c.arguments) for c in calls] == [("lookup_order", {"order_id": "4217"})]


def test_hermes_parses_calls_and_rejects_bad_ones():
    fmt = make_format("hermes")
    calls = fmt.parse('\n{"name": "lookup_order", "arguments": {"order_id": "4217"}}\n</tool_call>',
                      TOOLS)
    assert [(c.name, c.arguments) for c in calls] == [("lookup_order", {"order_id": "4217"})]
    with pytest.raises(PortError, match="undeclared tool 'fly'"):
        fmt.parse('\n{"name": "fly", "arguments": {}}\n</tool_call>', TOOLS)
    with pytest.raises(PortError, match="not valid JSON"):
        fmt.parse('\n{"name": "lookup_order", "arguments": {\n</tool_call>', TOOLS)


@pytest.mark.parametrize("evil", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{% set x = [] %}{{ x.append(1) }}",
])
def test_a_template_cannot_escape_the_sandbox(evil):
    fmt = make_format("hermes", "<|im_start|><tool_call>" + evil)
    with pytest.raises(PortError, match="chat template"):
        fmt.render(TURNS, TOOLS)


def test_a_template_reads_no_python_internals():
    fmt = make_format("hermes", "<|im_start|><tool_call>[{{ ''.__class__ }}{{ messages.__len__ }}]")
    assert fmt.render(TURNS) == "<|im_start|><tool_call>[]"
    with pytest.raises(PortError, match="refused the conversation: one call only"):
        make_format("llama3", "{{ raise_exception('one call only') }}").render(TURNS)
    with pytest.raises(ConfigError, match="does not parse"):
        make_format("hermes", "{% for %}")


def test_bad_model_files_are_clear_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist.*--llm-model PATH"):
        read_gguf_metadata(tmp_path / "nope.gguf")
    (tmp_path / "w.bin").write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ConfigError, match="not a GGUF file"):
        read_gguf_metadata(tmp_path / "w.bin")
    good = write_gguf(tmp_path / "t.gguf", HERMES)
    (tmp_path / "cut.gguf").write_bytes(good.read_bytes()[:40])
    with pytest.raises(ConfigError, match="corrupt or truncated"):
        read_gguf_metadata(tmp_path / "cut.gguf")
    from rejoinder.adapters.llama_llm import check_model

    assert check_model(good) == "hermes"
    with pytest.raises(ConfigError, match="cannot tell the chat format"):
        check_model(write_gguf(tmp_path / "x.gguf", None, name="Mystery"))
    assert check_model(tmp_path / "x.gguf", "llama3") == "llama3"


@pytest.mark.parametrize("name", ["hermes", "llama3"])
async def test_grammar_constrained_calls_in_every_format(llama_llm, name):
    """The piece-by-piece call writing (forced keys, sampled name and values) in each format's
    layout, on the real SmolLM2 weights with the format set by hand."""
    import threading

    from rejoinder.adapters._llama_engine import ChatEngine
    from rejoinder.ports import LLMRequest

    engine = ChatEngine(llama_llm._llm, chat_format=name)
    assert engine.format.name == name
    req = LLMRequest(tuple(TURNS), tools=TOOLS, tool_choice="lookup_order", temperature=0.0)
    with llama_llm._lock:
        out = list(engine.generate(req, threading.Event()))
    assert len(out) == 1 and isinstance(out[0], ToolCall) and out[0].name == "lookup_order"
    assert_valid_call(out[0])
    assert engine.last_stats.tool_calls == 1
    # eager needs an empty call list: in these formats it decides as lazy does
    engine.tool_mode = "eager"
    assert not engine.eager_decides


def test_llm_model_reaches_the_stack_and_the_run_conditions(tmp_path):
    """``--llm-model`` (``load_config(llm_model=…)``) sets ``stack.llama.model_path``; validation
    checks the file before any model loads; the run conditions record its format and sha256."""
    from rejoinder.adapters.llama_llm import smollm2_model_path
    from rejoinder.adapters.registry import file_sha256, validate
    from rejoinder.config import load_config
    from rejoinder.harness.conditions import models

    path = smollm2_model_path()
    cfg = load_config(None, tts="espeak", llm_model=path)
    assert cfg.stack.llm == "smollm2" and cfg.stack.llama.model_path == str(path)
    validate(cfg.stack)
    llm = models(cfg)["llm"]
    assert llm["chat_format"] == "smollm2" and llm["sha256"] == file_sha256(path)
    assert llm["files"][0]["sha256"] == llm["sha256"] and llm["model"] == path.stem
    with pytest.raises(ConfigError, match="--llm-model runs a GGUF in-process"):
        load_config(None, llm="openai", llm_model=path)
    with pytest.raises(ConfigError, match="does not exist"):
        validate(load_config(None, llm="llama", llm_model=tmp_path / "missing.gguf").stack)
    with pytest.raises(ConfigError, match="cannot tell the chat format"):
        validate(load_config(None, llm_model=write_gguf(tmp_path / "m.gguf", None, "Mystery")).stack)


def test_the_cli_names_a_bad_model_file_and_the_fix(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "1000"}  # one line however long tmp_path is
    proc = subprocess.run([sys.executable, "-m", "rejoinder", "call", str(tmp_path / "c.yaml"),
                           "--llm-model", str(tmp_path / "none.gguf")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert "none.gguf does not exist" in proc.stderr and "--llm-model" in proc.stderr


def test_a_bare_hermes_call_is_read_as_a_call_and_never_spoken(llama_llm, monkeypatch):
    """Qwen2.5-Coder-0.5B writes ``{"name": …}`` without ``<tool_call>``: with calls allowed it
    becomes a call (written under the grammar, in the canonical layout); with ``tool_choice``
    "none" it ends the reply. The first sampling pass is scripted, the call's are the model's."""
    import threading

    from rejoinder.adapters._llama_engine import ChatEngine
    from rejoinder.ports import LLMRequest

    engine = ChatEngine(llama_llm._llm, chat_format="hermes", tool_mode="lazy")
    real = engine._pieces
    scripted = ["One moment.", ' {"', "name", '": "', "lookup_order", '", "arguments": {}}']
    state = {"first": True}

    def pieces(*args, **kwargs):
        if state.pop("first", False):
            return iter(scripted)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "_pieces", pieces)
    req = LLMRequest(tuple(TURNS), tools=TOOLS, temperature=0.0)
    with llama_llm._lock:
        out = list(engine.generate(req, threading.Event()))
    assert out[0] == "One moment." and "".join(x for x in out if isinstance(x, str)) == "One moment. "
    calls = [x for x in out if isinstance(x, ToolCall)]
    assert len(calls) == 1 and calls[0].name in {t.name for t in TOOLS}
    assert_valid_call(calls[0])
    state["first"] = True
    with llama_llm._lock:
        out = list(engine.generate(LLMRequest(tuple(TURNS), tools=TOOLS, tool_choice="none"),
                                   threading.Event()))
    assert out == ["One moment.", " "]
