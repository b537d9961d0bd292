"""The examples' embeddings kept on disk between processes (:mod:`rejoinder.adapters._embedcache`):
the same vectors as the model computes, the caller's words never stored, a changed model never
served stale vectors, an unusable store never an error; and with the real SmolLM2-135M, the
vectors a second process reads are bit for bit those the model computes."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from rejoinder.adapters._embedcache import CachedEmbedding, default_directory, model_identity
from rejoinder.adapters._which import EMBED_TEMPLATE, ExampleMatcher
from rejoinder.ports import ToolSchema


def _vec(text: str) -> list[float]:
    """A deterministic stand-in embedding: letter counts of a-e, plus the length."""
    return [float(text.lower().count(c)) for c in "abcde"] + [float(len(text))]


class Counting:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, text: str) -> list[float]:
        self.seen.append(text)
        return _vec(text)


def test_a_second_process_reads_the_examples_instead_of_embedding_them(tmp_path):
    first, second = Counting(), Counting()
    texts = ["where is my order", "cancel it", "a person please"]
    a = CachedEmbedding(first, "model-1", tmp_path).examples(texts)
    assert first.seen == texts
    b_emb = CachedEmbedding(second, "model-1", tmp_path)  # a new object: another process
    b = b_emb.examples(texts + ["something new"])
    assert second.seen == ["something new"] and (b_emb.reused, b_emb.computed) == (3, 1)
    for x, y, t in zip(a, b, texts):
        assert np.array_equal(x, y) and np.array_equal(x, np.asarray(_vec(t), np.float32))


def test_the_callers_words_are_never_stored(tmp_path):
    model = Counting()
    emb = CachedEmbedding(model, "model-1", tmp_path)
    assert emb("my card number is 4111") == _vec("my card number is 4111")
    later = CachedEmbedding(model, "model-1", tmp_path)
    later.examples(["my card number is 4111"])
    assert later.computed == 1 and model.seen.count("my card number is 4111") == 2


def test_another_model_identity_is_embedded_again(tmp_path):
    model = Counting()
    CachedEmbedding(model, "model-1", tmp_path).examples(["hello"])
    other = CachedEmbedding(model, "model-2", tmp_path)
    other.examples(["hello"])
    assert other.computed == 1 and model.seen == ["hello", "hello"]
    f = tmp_path / "m.gguf"
    f.write_bytes(b"x" * 10)
    before = model_identity(f, 2)
    f.write_bytes(b"y" * 11)
    assert model_identity(f, 2) != before and model_identity(f, 2) != model_identity(f, 1)


def test_an_unusable_store_is_logged_and_the_vectors_computed(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    emb = CachedEmbedding(Counting(), "model-1", blocker / "cache")
    with caplog.at_level(logging.WARNING, logger="rejoinder.embedcache"):
        out = emb.examples(["hello", "bye"])
    assert [list(v) for v in out] == [_vec("hello"), _vec("bye")] and emb.computed == 2
    assert "REJOINDER_EMBED_CACHE" in caplog.text and "a-file" in caplog.text


def test_the_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("REJOINDER_EMBED_CACHE", "off")
    assert default_directory() is None
    monkeypatch.setenv("REJOINDER_EMBED_CACHE", str(tmp_path / "c"))
    assert default_directory() == tmp_path / "c"
    monkeypatch.delenv("REJOINDER_EMBED_CACHE")
    assert default_directory().name == "embeddings"


def test_the_matcher_is_the_same_through_the_cache(tmp_path):
    tools = (ToolSchema("lookup_order", "", {"type": "object", "properties": {}},
                        ("Where is my order?", "Order status.")),
             ToolSchema("cancel", "", {"type": "object", "properties": {}}, ("Cancel my booking.",)))
    plain = ExampleMatcher(_vec, tools, ("hello there",))
    for _ in range(2):  # stored, then read
        cached = ExampleMatcher(CachedEmbedding(_vec, "m", tmp_path), tools, ("hello there",))
        assert np.array_equal(plain.center, cached.center)
        for say in ("where's the order", "cancel the booking please", "hello"):
            assert plain.choose(say, ["lookup_order", "cancel"], talk=True) == \
                cached.choose(say, ["lookup_order", "cancel"], talk=True)


def test_the_real_models_vectors_come_back_bit_for_bit(tmp_path):
    pytest.importorskip("llama_cpp")
    from rejoinder.adapters.llama_llm import LlamaLLM
    llm = LlamaLLM(n_ctx=512)
    emb = llm.engine.check_embed  # SmolLM2's PromptEOL space (MiniLM chooses the tool)
    assert isinstance(emb, CachedEmbedding)
    texts = [EMBED_TEMPLATE.format(t) for t in ("Where is my order?", "Can I talk to a person?")]
    fresh = CachedEmbedding(llm._embed, "smollm2", tmp_path)
    stored = fresh.examples(texts)
    again = CachedEmbedding(llm._embed, "smollm2", tmp_path)
    read = again.examples(texts)
    assert again.reused == 2 and again.computed == 0
    for t, s, r in zip(texts, stored, read):
        direct = np.asarray(llm._embed(t), dtype=np.float64)
        assert direct.shape == (llm._embedder.n_embd(),)
        assert np.array_equal(r.astype(np.float64), direct) and np.array_equal(s, r)


def test_a_damaged_or_foreign_entry_is_embedded_again(tmp_path):
    import diskcache
    model = Counting()
    emb = CachedEmbedding(model, "model-1", tmp_path)
    emb.examples(["hello", "bye"])
    with diskcache.Cache(str(tmp_path)) as store:
        keys = sorted(store.iterkeys())
        assert len(keys) == 2 and all(isinstance(store[k], bytes) for k in keys)
        store[keys[0]] = b"\x93NUMPY garbage"
        store[keys[1]] = {"not": "npy bytes"}  # another type: a miss
    again = CachedEmbedding(model, "model-1", tmp_path)
    out = again.examples(["hello", "bye"])
    assert (again.computed, again.reused) == (2, 0)
    assert [list(v) for v in out] == [_vec("hello"), _vec("bye")]


class _Payload:
    """Unpickling this runs ``marker.touch()``: the harmless stand-in for code in a tampered store."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (type(self.marker).touch, (self.marker,))


def test_a_pickled_entry_is_never_unpickled_but_embedded_again(tmp_path):
    import diskcache
    store_dir, marker = tmp_path / "store", tmp_path / "RAN"
    model = Counting()
    emb = CachedEmbedding(model, "model-1", store_dir)
    emb.examples(["hello"])
    with diskcache.Cache(str(store_dir)) as store:  # someone able to write the directory
        [key] = list(store.iterkeys())
        store[key] = _Payload(marker)
    again = CachedEmbedding(model, "model-1", store_dir)
    assert [list(v) for v in again.examples(["hello"])] == [_vec("hello")]
    assert again.computed == 1 and not marker.exists()


def test_a_file_or_a_damaged_database_gets_its_own_fix(tmp_path, caplog):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "cache.db").write_bytes(b"this is not an SQLite file at all" * 100)
    with caplog.at_level(logging.WARNING, logger="rejoinder.embedcache"):
        for where in (a_file, damaged):
            emb = CachedEmbedding(Counting(), "model-1", where)
            assert [list(v) for v in emb.examples(["hi"])] == [_vec("hi")]
    first, second = caplog.records[0].getMessage(), caplog.records[1].getMessage()
    assert "is a file, not a directory" in first
    assert "damaged: delete" in second and str(damaged) in second
