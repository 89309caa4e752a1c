"""An echo rig for the replay client: the agent hears itself, as on a speakerphone.

A client without echo cancellation plays the agent's audio from its
loudspeaker, and the room brings it back into the microphone: quieter, a
little late, smeared by the room. :class:`Echo` simulates that on the client's
clock. It plays the agent's frames back to back from their arrival and drops
what is queued at ``clear`` (as ``measure.playback_intervals`` assumes), and
adds to every microphone frame what the loudspeaker played ``delay`` earlier,
through a short room response, ``gain_db`` below the agent's level.

The :class:`EchoPath` is drawn with a seed from -10 to -25 dB and 50 to
250 ms late. As in a real room, one path holds for the whole
call (``paths="call"``, the default); ``paths="answer"`` draws a new one for
each answer, a harder test of how fast a canceller finds a path. The room is
``small`` (60 ms, the direct sound loudest) or ``reverberant`` (a 400 ms tail,
RT60 about 500 ms, holding four times the direct sound's energy).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

GAIN_DB = (-25.0, -10.0)
DELAY_MS = (50.0, 250.0)
ROOMS = ("small", "reverberant")
PATHS = ("call", "answer")
# Each room: the response's length, and the time its noise tail falls by 1/e in. Small: a handset on a table
# (RT60 about 100 ms). Reverberant: a bare room (RT60 about 500 ms).
ROOM_MS = {"small": 60.0, "reverberant": 400.0}
DECAY_MS = {"small": 15.0, "reverberant": 72.0}
REVERB_TAIL_DB = 6.0  # the reverberant tail's energy over the direct sound's
REFLECTIONS = 4  # early reflections: single taps within the first 20 ms
# A pause in the agent's audio longer than this starts a new answer (with paths="answer", a new path).
NEW_ANSWER_S = 0.5
HISTORY_S = 1.0  # loudspeaker audio kept beyond what the longest path still needs


@dataclass(frozen=True)
class EchoPath:
    """The way back from the loudspeaker to the microphone."""

    gain_db: float  # echo energy relative to the played audio
    delay_ms: float  # before the direct sound arrives
    seed: int  # of the room response
    room: str = "small"

    def room_response(self, rate: int) -> np.ndarray:
        """After the delay: a direct tap, a few early reflections and a decaying noise tail, scaled to ``gain_db``."""
        rng = np.random.default_rng(self.seed)
        length = int(ROOM_MS[self.room] * rate / 1000)
        t = np.arange(length) / rate
        room = 0.3 * rng.standard_normal(length) * np.exp(-t / (DECAY_MS[self.room] / 1000))
        # The tail is duller than the direct sound: walls absorb the highs (one-pole low-pass).
        for index in range(1, length):
            room[index] += 0.6 * room[index - 1]
        if self.room == "reverberant":
            room *= math.sqrt(10 ** (REVERB_TAIL_DB / 10) / float(np.sum(room[1:] ** 2)))
        room[0] = 1.0
        for _ in range(REFLECTIONS):
            at = int(rng.uniform(0.002, 0.02) * rate)
            room[at] += rng.choice([-1.0, 1.0]) * rng.uniform(0.2, 0.6)
        room *= 10 ** (self.gain_db / 20) / math.sqrt(float(np.sum(room**2)))
        return room.astype(np.float32)

    def describe(self) -> dict:
        return {
            "gain_db": round(self.gain_db, 1),
            "delay_ms": round(self.delay_ms, 1),
            "seed": self.seed,
            "room": self.room,
        }


def draw_path(rng: np.random.Generator, room: str = "small") -> EchoPath:
    return EchoPath(float(rng.uniform(*GAIN_DB)), float(rng.uniform(*DELAY_MS)), int(rng.integers(0, 2**31 - 1)), room)


class Echo:
    """The loudspeaker and the room of one replayed session, on the client's clock.

    ``played`` and ``cleared`` are called by the reader as the agent's audio
    and ``clear`` messages arrive; ``capture`` by the sender for each
    microphone frame, which it adds to the user's audio.
    """

    def __init__(self, rate: int, seed: int = 0, origin: float | None = None, paths: str = "call", room: str = "small"):
        if paths not in PATHS or room not in ROOMS:
            raise ValueError(f"echo paths {paths!r} or room {room!r}: paths are one of {PATHS}, rooms of {ROOMS}")
        self.rate = rate
        self.new_path_per_answer = paths == "answer"
        self.room = room
        self.origin = time.monotonic() if origin is None else origin
        self._rng = np.random.default_rng(seed)
        self.paths: list[dict] = []  # each answer's path, with when it started (s after origin)
        self._room = np.zeros(1, np.float32)
        self._delay = 0  # samples
        self._speaker = np.zeros(0, np.float32)  # what the loudspeaker plays, from sample _base on
        self._base = 0
        self._drains = 0  # the sample where the loudspeaker's queue runs dry

    def _sample(self, at: float) -> int:
        return int(round((at - self.origin) * self.rate))

    def played(self, at: float, samples: np.ndarray) -> None:
        """Agent audio that arrived at ``at``: it plays once what is queued before it has played."""
        now = self._sample(at)
        if not self.paths or (self.new_path_per_answer and now - self._drains > NEW_ANSWER_S * self.rate):
            path = draw_path(self._rng, self.room)
            self._room = path.room_response(self.rate)
            self._delay = int(path.delay_ms * self.rate / 1000)
            self.paths.append({"at_s": round(now / self.rate, 3), **path.describe()})
        start = max(self._drains, now)
        end = start + len(samples)
        if end - self._base > len(self._speaker):
            self._speaker = np.concatenate([self._speaker, np.zeros(end - self._base - len(self._speaker), np.float32)])
        self._speaker[start - self._base : end - self._base] = samples
        self._drains = end

    def cleared(self, at: float) -> None:
        """``clear``: what had not played by ``at`` never will."""
        now = max(self._sample(at), self._base)
        self._speaker[now - self._base :] = 0.0
        self._drains = min(self._drains, now)

    def capture(self, at: float, count: int) -> np.ndarray:
        """The echo in the ``count`` microphone samples that end at ``at``."""
        # What the room smears into these samples was played delay earlier, over the response's length.
        end = self._sample(at) - self._delay
        first = end - count - len(self._room) + 1
        played = np.zeros(end - first, np.float32)
        lo, hi = max(first, self._base), min(end, self._base + len(self._speaker))
        if hi > lo:
            played[lo - first : hi - first] = self._speaker[lo - self._base : hi - self._base]
        echo = np.convolve(played, self._room, mode="valid").astype(np.float32)
        self._forget(first - int(HISTORY_S * self.rate))
        return echo

    def _forget(self, before: int) -> None:
        if before > self._base:
            drop = min(before - self._base, len(self._speaker))
            self._speaker = self._speaker[drop:]
            self._base += drop
