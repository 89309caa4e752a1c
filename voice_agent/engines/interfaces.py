"""The interfaces of the speech engines, beside :class:`~.llm.base.LLMBackend`.

A session reaches every model through these, so a fake in a test or a cloud
service fits wherever the embedded models do. Audio is float32 mono in
[-1, 1]: 16 kHz into VAD and STT, :attr:`TTSBackend.sample_rate` out of TTS.
One engine serves every session of a process; per-session state lives in what
:meth:`VADBackend.stream` returns.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class SpeechStream(Protocol):
    """One audio stream's VAD state."""

    def process(self, samples: np.ndarray) -> list[float]:
        """Feed 16 kHz audio of any length; one speech probability per 512-sample window completed."""
        ...


class VADBackend(Protocol):
    def stream(self) -> SpeechStream:
        """A fresh stream, for one session's audio."""
        ...


@dataclass(frozen=True)
class Reading:
    """What a speech-to-text model made of some audio."""

    text: str
    no_speech: bool  # the model judges that the audio holds no speech: ``text`` is its guess at a noise


class STTBackend(Protocol):
    async def transcribe(self, audio: np.ndarray) -> str:
        """The words in 16 kHz ``audio``. Cannot be interrupted: a caller that no longer needs it drops the result."""
        ...

    async def read(self, audio: np.ndarray) -> Reading:
        """As :meth:`transcribe`, with the model's judgement of whether ``audio`` holds speech at all: for sound
        that is likely a noise (over the agent), which Whisper reads words into ("Oh my god." for a hiss)."""
        ...

    async def warm_up(self) -> None:
        """Pay one-time costs before the first user."""
        ...

    async def close(self) -> None: ...


class TTSBackend(Protocol):
    sample_rate: int

    def synthesize(self, text: str) -> AsyncGenerator[np.ndarray, None]:
        """Audio for ``text``, piece by piece. Closing the iterator stops the synthesis."""
        ...

    async def warm_up(self) -> None:
        """Pay one-time costs before the first user."""
        ...

    async def close(self) -> None: ...
