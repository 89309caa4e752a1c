"""The models a process loads once and every session shares."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ..config import Settings
from .first_chunks import FirstChunks
from .interfaces import STTBackend, TTSBackend, VADBackend
from .llm.base import LLMBackend
from .phrase_cache import PhraseCache
from .smart_turn import SmartTurn
from .stt import WhisperSTT
from .stt_queue import STTQueue
from .tts import PiperTTS
from .vad import SileroVAD

log = logging.getLogger(__name__)


@dataclass
class Engines:
    vad: VADBackend
    stt: STTBackend
    llm: LLMBackend
    tts: TTSBackend
    smart_turn: SmartTurn | None = None  # the optional audio end-of-turn model (--smart-turn-model)
    # Every session's Whisper calls go through it, in turn and within a budget. It looks ``stt`` up at each
    # call, so a test may swap the model.
    stt_queue: STTQueue = field(init=False)
    # Every session's replies: the later chunks of one give way to the first chunks (and finals) of others.
    first_chunks: FirstChunks = field(init=False)

    def __post_init__(self) -> None:
        self.stt_queue = STTQueue(lambda: self.stt)
        self.first_chunks = FirstChunks(self._llm_waiting)

    def _llm_waiting(self) -> int:
        line = getattr(self.llm, "wait_line", None)  # the embedded llama.cpp's: other LLMs queue elsewhere
        return 0 if line is None else line.depth()

    async def warm_up(self) -> None:
        started = time.perf_counter()
        await self.stt.warm_up()
        await self.llm.warm_up()
        await self.tts.warm_up()
        log.info("warm-up done in %.1f s", time.perf_counter() - started)

    async def close(self) -> None:
        await self.stt_queue.close()
        for engine in (self.stt, self.llm, self.tts):
            await engine.close()
        if self.smart_turn is not None:
            await self.smart_turn.close()


def create_llm(settings: Settings) -> LLMBackend:
    if settings.llm == "llamacpp":
        from .llm.llamacpp import LlamaCppBackend

        return LlamaCppBackend(
            settings.llm_model,
            instances=settings.llm_instances,
            threads=settings.llm_threads,
            prompt_threads=settings.llm_prompt_threads,
            context=settings.llm_context,
            max_tokens=settings.llm_max_tokens,
            temperature=settings.llm_temperature,
            repeat_penalty=settings.llm_repeat_penalty,
            frequency_penalty=settings.llm_frequency_penalty,
            presence_penalty=settings.llm_presence_penalty,
            warm_up_prompt=settings.system_prompt,
            q8_0=settings.llm_requantize == "q8_0" or (settings.llm_requantize == "auto" and not settings.llm_model),
        )
    if settings.llm == "vllm":
        from .llm.vllm_engine import VLLMBackend

        return VLLMBackend(
            settings.llm_model,
            dtype=settings.llm_dtype,
            max_model_len=settings.llm_context,
            gpu_memory_utilization=settings.llm_gpu_memory,
            tensor_parallel_size=settings.llm_tensor_parallel,
            enforce_eager=settings.llm_enforce_eager,
            max_tokens=settings.llm_max_tokens,
            temperature=settings.llm_temperature,
            repeat_penalty=settings.llm_repeat_penalty,
            frequency_penalty=settings.llm_frequency_penalty,
            presence_penalty=settings.llm_presence_penalty,
        )
    if settings.llm == "openai":
        from .llm.openai_compat import OpenAICompatBackend

        return OpenAICompatBackend(
            settings.llm_url,
            model=settings.llm_model,
            api_key_env=settings.llm_api_key_env,
            max_tokens=settings.llm_max_tokens,
            temperature=settings.llm_temperature,
            repeat_penalty=settings.llm_repeat_penalty,
            frequency_penalty=settings.llm_frequency_penalty,
            presence_penalty=settings.llm_presence_penalty,
            timeout_s=settings.llm_timeout_s,
            retries=settings.llm_retries,
        )
    raise ValueError(f"unknown LLM backend {settings.llm!r}")


def load_engines(settings: Settings) -> Engines:
    """Load every model. Blocking: call it from a worker thread in a server."""
    started = time.perf_counter()
    log.info("loading VAD")
    vad = SileroVAD()
    stt = WhisperSTT(
        settings.stt_model,
        device=settings.stt_device,
        compute_type=settings.stt_compute_type,
        threads=settings.stt_threads,
        decode_threads=settings.stt_decode_threads,
        workers=settings.stt_workers,
        beam_size=settings.stt_beam_size,
        language=settings.stt_language,
        window_s=settings.stt_window_s,
        background_partials=settings.stt_background_partials,
        partial_workers=settings.stt_partial_workers,
    )
    llm = create_llm(settings)
    tts = PhraseCache(PiperTTS(settings.tts_voice, threads=settings.tts_threads), size=settings.tts_phrase_cache)
    smart_turn = None
    if settings.smart_turn_model:
        log.info("loading Smart Turn %s", settings.smart_turn_model)
        smart_turn = SmartTurn(settings.smart_turn_model)
    log.info("models loaded in %.1f s", time.perf_counter() - started)
    engines = Engines(vad=vad, stt=stt, llm=llm, tts=tts, smart_turn=smart_turn)
    engines.stt_queue = STTQueue(
        lambda: engines.stt,
        settings.stt_workers,
        settings.stt_budget,
        settings.stt_budget_burst_s,
        partial_workers=settings.stt_partial_workers,
        partials_apart=stt.background_partials,
    )
    if settings.first_audio_first:
        engines.first_chunks = FirstChunks(
            engines._llm_waiting, lambda: engines.stt_queue.finals_in_flight(), first_audio_first=True
        )
    return engines
