"""Endpointing under load: a transcript that comes late ends the same turns, only later.

Time here is the audio's: the fakes answer once the listener has received a
given amount of audio past the moment they were asked, so a run is the same
at every machine load. The same conversation with Whisper answering at once
and 800 ms late must commit the same turns.
"""

from __future__ import annotations

import asyncio

import numpy as np

from tests.test_listener import Floor
from tests.test_session import EnergyVAD, quiet, tone
from voice_agent.config import Settings
from voice_agent.engines.stt_queue import STTQueue
from voice_agent.turn_taking.listener import Listener
from voice_agent.turn_taking.turn_signals import PauseSignals

RATE = 16000
FRAME = 320  # 20 ms, as clients send it

# The user's words by how much of their audio Whisper reads (seconds, at least), and what the LLM makes of
# them: words that give no hint alone, which the LLM calls broken off, a pause, then the rest, a question.
FIRST = "I'd like to book a table"
WHOLE = "I'd like to book a table for six people. Can we sit outside?"
WORDS = [(0.0, FIRST), (2.5, WHOLE)]
LOGPROB = {FIRST: -12.0, WHOLE: -0.3}
LLM_DELAY_S = 0.1


class AudioClock:
    """Futures resolved once the listener has received ``delay`` seconds of audio more than when they were made."""

    def __init__(self) -> None:
        self.listener: Listener | None = None
        self._due: list[tuple[int, asyncio.Future, object]] = []

    def after(self, delay_s: float, value: object) -> asyncio.Future:
        assert self.listener is not None
        future = asyncio.get_running_loop().create_future()
        self._due.append((self.listener.timeline.received + int(delay_s * RATE), future, value))
        return future

    def tick(self) -> None:
        assert self.listener is not None
        received = self.listener.timeline.received
        for due in [d for d in self._due if d[0] <= received]:
            self._due.remove(due)
            if not due[1].done():
                due[1].set_result(due[2])


class LateSTT:
    def __init__(self, clock: AudioClock, delay_s: float):
        self._clock, self._delay_s = clock, delay_s

    async def transcribe(self, audio: np.ndarray) -> str:
        text = [words for seconds, words in WORDS if len(audio) / RATE >= seconds][-1]
        return await self._clock.after(self._delay_s, text)


class LateLLM:
    def __init__(self, clock: AudioClock):
        self._clock = clock

    async def end_of_turn_logprob(self, messages, *, answering=False):
        return await self._clock.after(LLM_DELAY_S, LOGPROB[messages[-1]["content"]])


class SignallingFloor(Floor):
    """Asks the LLM about each speculative transcript, as the session does; records each commit's moment."""

    def __init__(self, llm: LateLLM):
        super().__init__()
        self.llm = llm
        self.commits: list[tuple[int, int, int, str | None, int]] = []

    def user_pauses(self, turn, transcript, stt_ms):
        super().user_pauses(turn, transcript, stt_ms)
        if turn.needs_signals:
            messages = [{"role": "user", "content": transcript}]
            turn.gather(PauseSignals(transcript, None, self.llm, messages, None, None))

    def commit(self, turn):
        assert turn.decision is not None
        received = self.listener.timeline.received
        self.commits.append((turn.id, turn.start, turn.last_speech, turn.decision[0].transcript, received))
        super().commit(turn)


async def conversation(stt_delay_s: float) -> list[tuple[int, int, int, str | None, int]]:
    clock = AudioClock()
    floor = SignallingFloor(LateLLM(clock))
    settings = Settings(turn_decision="rules", end_silence_telling_ms=2000, end_silence_incomplete_ms=2000)
    stt = STTQueue(lambda: LateSTT(clock, stt_delay_s), rate=0.0).session()
    made = Listener(settings, EnergyVAD(), lambda: stt, lambda event: None, floor, floor)
    floor.listener = clock.listener = made
    # The first words, a pause of 1.2 s that the LLM says they go on from, the rest, and the silence after it.
    audio = np.concatenate([quiet(0.5), tone(1.2), quiet(1.2), tone(1.4), quiet(3.0)])
    for start in range(0, len(audio), FRAME):
        made.feed(audio[start : start + FRAME])
        for _ in range(4):  # what the frame set off (a transcript, a signal) runs before the next one arrives
            clock.tick()
            await asyncio.sleep(0)
    await made.close()
    return floor.commits


async def test_a_transcript_that_comes_late_commits_the_same_turns_only_later():
    at_once, late = await conversation(0.0), await conversation(0.8)
    # One turn, on the whole question, with or without the delay: the pause is not answered either way. Read
    # at once, the late words alone ("no hint": 600 ms) would have ended the turn in the pause.
    assert [c[:4] for c in at_once] == [c[:4] for c in late]
    [(_, _, _, words, committed_at_once)] = at_once
    assert words == WHOLE
    [(*_, committed_late)] = late
    assert committed_at_once < committed_late
