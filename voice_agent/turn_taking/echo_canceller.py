"""The agent's own voice taken out of a session's input by WebRTC's audio processing module.

On a speakerphone, or in a browser without its own echo cancellation, what the
agent says comes back into its input, later and quieter, smeared by the room.
WebRTC's AEC3 (through ``livekit``'s binding) cancels it given the output as
its reverse stream: it finds the echo path's delay and response itself, and
converges over the first seconds of output. The input is processed before the
VAD and the STT see it, so neither hears the echo it removed.

Both streams go in 10 ms frames at the pipeline rate, in step: each input frame
takes the next frame of output from a queue of what the client was sent
(silence when nothing plays). The pacer keeps the client's buffer its output
lead ahead, so the queue holds about as much as the client's buffer, and an
output frame leaves it at about the moment the client plays it. A clear
empties both buffers.

Where the queue is empty, the client plays new output as it arrives, but the
input that holds its echo arrives as late as the input is then: a client that
sends late (a busy one, a network's jitter) would move the echo's delay at each
answer, and AEC3 takes a second or two to find a new delay. So output that
starts into an empty queue waits behind as much silence as the input is late,
against the earliest it ever came: the delay stays the room's and the steady
latency's, answer after answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from livekit.rtc import AudioFrame, AudioProcessingModule

from ..audio import PIPELINE_RATE, StreamResampler
from ..config import Settings
from ..protocols.events import AgentAudio, Clear, OutputEvent

FRAME = PIPELINE_RATE // 100  # the APM takes 10 ms frames, no other size
# Output queued beyond this is not in the client's buffer any more (its input stalled, or the pacer ran far
# ahead): the oldest is dropped, so that the queue stays a model of what the client plays now.
MAX_QUEUED = 2 * PIPELINE_RATE


class EchoCanceller:
    """One session's echo canceller (and noise suppressor), fed the agent's output and the user's input."""

    def __init__(
        self,
        echo_cancellation: bool = True,
        noise_suppression: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.cancels_echo = echo_cancellation
        self.suppresses_noise = noise_suppression
        self._apm = AudioProcessingModule(echo_cancellation=echo_cancellation, noise_suppression=noise_suppression)
        self._input = np.zeros(0, np.float32)  # input short of a frame, carried to the next call
        self._played = np.zeros(0, np.float32)  # output sent to the client, not yet played
        self._resampler: StreamResampler | None = None
        self._clock = clock
        self._received = 0  # input samples
        self._earliest: float | None = None  # when input sample 0 would have come, had the input never been late

    def output(self, event: OutputEvent, rate: int) -> None:
        """An event sent to the client, whose audio is at ``rate``: its audio is played, a clear drops it."""
        if isinstance(event, AgentAudio):
            self.played(event.samples, rate)
        elif isinstance(event, Clear):
            self.cleared()

    def played(self, samples: np.ndarray, rate: int) -> None:
        """The agent's audio at ``rate``, as it is sent to the client."""
        if self._resampler is None or self._resampler.in_rate != rate:
            self._resampler = StreamResampler(rate, PIPELINE_RATE, "MQ")
        queued = self._played if len(self._played) else np.zeros(self._input_due(), np.float32)
        self._played = np.concatenate([queued, self._resampler.process(samples)])[-MAX_QUEUED:]

    def cleared(self) -> None:
        """The client dropped the audio it had not played yet."""
        self._played = np.zeros(0, np.float32)

    def process(self, samples: np.ndarray) -> np.ndarray:
        """The input ``samples`` (float32 at the pipeline rate) with the echo out, in whole 10 ms frames: the
        rest is held back until the next call."""
        self._received += len(samples)
        started = self._clock() - self._received / PIPELINE_RATE
        if self._earliest is None or started < self._earliest:
            self._earliest = started
        pending = np.concatenate([self._input, samples.astype(np.float32, copy=False)])
        count = len(pending) // FRAME * FRAME
        self._input = pending[count:]
        out = np.empty(count, np.float32)
        for start in range(0, count, FRAME):
            self._apm.process_reverse_stream(_frame(self._next_played()))
            frame = _frame(pending[start : start + FRAME])
            self._apm.process_stream(frame)
            out[start : start + FRAME] = np.frombuffer(frame.data, np.int16) / 32768.0
        return out

    def _input_due(self) -> int:
        """Input samples not yet processed that will have been recorded by now: those the next output frame
        would be paired with, had it played from the first of them, where it plays from now."""
        if self._earliest is None:
            return 0
        recorded = int((self._clock() - self._earliest) * PIPELINE_RATE)
        return max(0, recorded - (self._received - len(self._input)))

    def _next_played(self) -> np.ndarray:
        frame, self._played = self._played[:FRAME], self._played[FRAME:]
        return frame if len(frame) == FRAME else np.concatenate([frame, np.zeros(FRAME - len(frame), np.float32)])


def input_canceller(
    settings: Settings,
    client_cancels_echo: bool = False,
    noise_suppression: bool | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> EchoCanceller | None:
    """The canceller ``settings`` ask for, or None. ``client_cancels_echo``: the client said its input is
    echo-cancelled already (a browser's own canceller), which turns off ``auto``. ``noise_suppression``: the
    session's own choice (a Realtime client's ``noise_reduction``); None: the settings'."""
    echo = settings.echo_cancellation == "on" or (settings.echo_cancellation == "auto" and not client_cancels_echo)
    noise = bool(settings.noise_suppression) if noise_suppression is None else noise_suppression
    if not echo and not noise:
        return None
    return EchoCanceller(echo, noise, clock)


def _frame(samples: np.ndarray) -> AudioFrame:
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16)
    return AudioFrame(bytearray(pcm.tobytes()), PIPELINE_RATE, 1, FRAME)
