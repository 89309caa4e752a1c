"""The graceful way out: a user who goes on after a pause was not done, so the two parts are one turn.

Speech that starts before the user heard any of the answer cancels it, and
the new turn starts where the answered one did. Speech that starts within
``reply_grace_ms`` of the answer's first audio pauses it at once; if it turns
out to be words, the answer is withdrawn and the turn reaches back to the
start of the one it answered. Where the agent's own voice comes back, the
answer is not paused at once (its echo would pause every answer, on a
speakerphone), but speech that began within the grace and that the barge-in
check finds to be the user's words withdraws it all the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ..protocols.events import Metrics, OutputEvent, TurnIgnored
from .answer import Answer, Hold
from .floor import Floor, FloorState, HandOver, Pause, Resume, Withdraw
from .user_turn import UserTurn

log = logging.getLogger(__name__)


def held_at_onset(answer: Answer | None) -> bool:
    """Whether a speech window in the grace, before it made a turn, paused ``answer``."""
    return answer is not None and answer.reply is not None and answer.held_by(Hold.GRACE_ONSET)


class TurnMerge:
    def __init__(
        self,
        floor: Floor,
        emit: Callable[[OutputEvent], None],
        clock: Callable[[], float],
        grace_ms: Callable[[], float],
        echo_comes_back: Callable[[], bool],
        session_id: str = "",
    ):
        self._floor, self._emit, self._clock, self._id = floor, emit, clock, session_id
        self._grace_ms = grace_ms  # --reply-grace-ms, as the session has it
        self._echo_comes_back = echo_comes_back  # the agent's own voice comes back in the input
        self.overlap_ms_total = 0.0  # agent voice heard by a user who was not done, over the session
        self._grace_taken: Answer | None = None  # the user went on within its grace: their turn may withdraw it

    def begin_turn(self, start: int) -> tuple[int, bool]:
        """Speech from sample ``start``: where its turn really starts, and whether it is over the agent."""
        floor = self._floor
        answer = floor.answer
        if answer is not None and answer.heard_nothing:
            # The user went on before the agent said anything: one turn, not two.
            if answer.turn_start is not None:
                start = answer.turn_start
            if answer.turn_id is not None:
                self._emit(TurnIgnored(answer.turn_id, merged=True))
            # The client hears of the new turn first, then of the answer it cancelled (Session.announce).
            floor.transition(Withdraw(report=False))
        elif self._in_grace() or held_at_onset(answer):
            # The user goes on right after the agent began: they were only pausing.
            # Silent at once; if it is words, the answer is withdrawn (withdraw).
            floor.transition(Pause(answer, Hold.TURN, "the user went on within the grace"))
            floor.transition(HandOver(answer, Hold.GRACE_ONSET, Hold.TURN))  # this turn took the onset's pause over
            self._grace_taken = answer
        return start, floor.state in (FloorState.SPEAKING, FloorState.PAUSED)

    def speech_begins(self) -> bool:
        """In the grace, the first speech window pauses the answer, before there is speech enough for a turn
        (--vad-min-speech-ms): what the user hears of it, if they go on, is that much shorter. Whether the
        answer is paused at this onset, by this or an earlier window."""
        answer = self._floor.answer
        if answer is None or held_at_onset(answer):
            return answer is not None
        if not self._in_grace():
            return False
        if answer.paused:
            return False  # paused for something else, which will resume it
        self._floor.transition(Pause(answer, Hold.GRACE_ONSET, "speech began within the grace"))
        return True

    def speech_faded(self) -> None:
        """The speech that paused the answer made no turn (a click, a breath): the answer goes on."""
        if held_at_onset(self._floor.answer):
            self._floor.transition(Resume(self._floor.answer, Hold.GRACE_ONSET, "the speech in the grace made no turn"))

    def take_grace(self, answer: Answer) -> bool:
        """Whether the user went on within ``answer``'s grace: true once, for the turn that did, which may
        withdraw it."""
        taken, self._grace_taken = self._grace_taken is answer, None
        return taken

    def _in_grace(self) -> bool:
        """Whether speech now means the user was not done: within the grace of the answer's first audio, in a
        session whose own voice does not come back (its echo's first speech window would pause every answer)."""
        answer = self._floor.answer
        return (
            answer is not None
            and answer.reply is not None
            and not self._echo_comes_back()
            and answer.in_grace(self._clock(), self._grace_ms())
        )

    def began_in_grace(self, turn: UserTurn) -> bool:
        """Whether ``turn``, over the answer where the agent's echo comes back, began within the grace of its
        first audio: if it interrupts, the user was going on (a question answered at its comma is one
        question), not stopping the agent. Timed from the speech's start, not its turn's: the echo test may
        hide the first speech windows. Without an echo, the turn that takes the grace's pause decides."""
        answer = self._floor.answer
        grace_ms = self._grace_ms()
        if (
            not grace_ms
            or not self._echo_comes_back()
            or answer is None
            or answer.turn_start is None
            or answer.voiced_at is None
        ):
            return False
        return (turn.speech_began_at() - answer.voiced_at) * 1000 <= grace_ms

    def unanswered_start(self, turns: Iterable[UserTurn]) -> int | None:
        """The start of a committed turn's audio that may yet merge with one of ``turns`` (the live turn, and
        those still being read): one that began within the grace may withdraw the answer well past it, once
        its words are checked over the echo."""
        answer = self._floor.answer
        if answer is None or not (
            answer.heard_nothing
            or answer.in_grace(self._clock(), self._grace_ms())
            or any(self.began_in_grace(turn) for turn in turns)
        ):
            return None
        return answer.turn_start

    def withdraw(self, turn: UserTurn, answered_start: int) -> None:
        """The user was not done: the answer goes, and ``turn`` reaches back to ``answered_start``."""
        answer, reply = self._floor.answer, self._floor.reply
        if answer is not None and answer.turn_id is not None:
            self._emit(TurnIgnored(answer.turn_id, merged=True))  # its words are this turn's now
        self._floor.transition(Withdraw())
        overlap_ms = 0.0 if reply is None else reply.heard_s() * 1000.0
        self.overlap_ms_total += overlap_ms
        log.info("session %s: answer withdrawn, the user goes on (%.0f ms of it heard)", self._id, overlap_ms)
        self._emit(
            Metrics(
                {
                    "turn": None if reply is None else reply.turn,
                    "withdrawn": True,
                    "overlap_ms": round(overlap_ms, 1),
                    "overlap_total_ms": round(self.overlap_ms_total, 1),
                }
            )
        )
        turn.extend_back(answered_start)
