"""The agent's side of the floor: one state machine, the only code that starts, pauses, resumes or ends an answer.

LISTENING: no answer. PREPARING: a turn (or text, or fixed words) is being
answered, nothing plays yet. SPEAKING: its reply is the one the user hears
(the grace runs from its first audio). PAUSED: SPEAKING, held back by one
holder or more (:class:`~.answer.Hold`). The answer ends COMPLETED or FAILED,
or is cancelled: YIELDED (the user, or the client, takes the floor: what was
heard stays in the history), WITHDRAWN (the user was not done: the answer
goes, unheard) or CLOSED; each goes back to LISTENING.

Everything that changes the agent's side comes in as an event to
:meth:`Floor.transition`: the session's commits and answers, and the
verdicts and timers of the speech over the agent (:mod:`.interruptions`,
:mod:`.turn_merge`). What the client is told of it goes out from there: the
``clear`` of its buffer, the response's start and end, and ``agent_state``.
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..protocols.events import TURN_DETECTED, AgentState, Clear, OutputEvent, ResponseEnded, ResponseStarted
from ..reply.pipeline import Reply
from .answer import CANCELLED, COMPLETED, FAILED, Answer, Hold

log = logging.getLogger(__name__)


class FloorState(enum.Enum):
    LISTENING = "listening"
    PREPARING = "preparing"
    SPEAKING = "speaking"
    PAUSED = "paused"


# What a client is told the agent does in each state (agent_state).
SHOWN_STATE = {
    FloorState.LISTENING: "listening",
    FloorState.PREPARING: "thinking",
    FloorState.SPEAKING: "speaking",
    FloorState.PAUSED: "speaking",
}


@dataclass(frozen=True)
class Prepare:
    """``answer`` is the one under way now."""

    answer: Answer


@dataclass(frozen=True)
class Play:
    """``reply`` is the one the user hears of ``answer``."""

    answer: Answer
    reply: Reply


@dataclass(frozen=True)
class Pause:
    answer: Answer | None
    holder: Hold
    why: str


@dataclass(frozen=True)
class Resume:
    answer: Answer | None
    holders: Hold | tuple[Hold, ...]
    why: str


@dataclass(frozen=True)
class HandOver:
    """``to`` takes over ``holder``'s pause of ``answer``, with no frame let out between."""

    answer: Answer | None
    holder: Hold
    to: Hold


@dataclass(frozen=True)
class Finish:
    """``answer`` played to its end, or ``failed``."""

    answer: Answer
    failed: bool


@dataclass(frozen=True)
class Drop:
    """``answer`` ends without a response: its turn was none of the agent's business, or the client answers it."""

    answer: Answer


@dataclass(frozen=True)
class Yield:
    """The user (or the client, ``reason``) takes the floor: the answer stops, and what was heard of it stays."""

    reason: str = TURN_DETECTED


@dataclass(frozen=True)
class Withdraw:
    """The user was not done: the answer goes. ``report``: its end is told now, else once the new turn is."""

    report: bool = True


@dataclass(frozen=True)
class Close:
    """The session ends."""


@dataclass(frozen=True)
class Announced:
    """The client was told of a new user turn: the end of an answer it withdrew follows."""


FloorEvent = Prepare | Play | Pause | Resume | HandOver | Finish | Drop | Yield | Withdraw | Close | Announced


class Floor:
    def __init__(self, emit: Callable[[OutputEvent], None], cut_off: Callable[[Reply], None]):
        self._emit = emit
        self._cut_off = cut_off  # an answer the user took the floor from: what they heard of it is kept
        self.answer: Answer | None = None
        self._numbers = itertools.count(1)
        self._told = FloorState.LISTENING  # the state after the last transition
        self._unreported: ResponseEnded | None = None  # an answer a new turn withdrew, told after that turn

    @property
    def state(self) -> FloorState:
        answer = self.answer
        if answer is None:
            return FloorState.LISTENING
        if answer.reply is None:
            return FloorState.PREPARING
        return FloorState.PAUSED if answer.paused else FloorState.SPEAKING

    @property
    def reply(self) -> Reply | None:
        """The reply the user hears, if any."""
        return None if self.answer is None else self.answer.reply

    def transition(self, event: FloorEvent) -> None:
        """The one way the agent's side changes."""
        answer = self.answer
        match event:
            case Prepare(new):
                self.answer = new
            case Play(playing, reply) if playing is answer:
                number = next(self._numbers)
                playing.attach(reply, number)
                self._emit(ResponseStarted(number))
            case Pause(held, holder, why) if held is answer and held is not None and held.reply is not None:
                held.pause(holder, why)
            case Resume(held, holders, why) if held is answer and held is not None:
                held.resume(holders, why)
            case HandOver(held, holder, to) if held is answer and held is not None:
                held.hand_over(holder, to)
            case Finish(ended, failed) if ended is answer:
                self.answer = None
                ended.finish(failed)
                assert ended.number is not None  # it played
                self._emit(ResponseEnded(ended.number, FAILED if failed else COMPLETED))
            case Drop(dropped) if dropped is answer:
                self.answer = None
            case Yield(reason) if answer is not None:
                if (cut := answer.reply) is not None:
                    if cut.started_audio:
                        self._emit(Clear())
                    self._cut_off(cut)
                self._cancel(answer, reason)
            case Withdraw(report) if answer is not None:
                if answer.reply is not None and answer.reply.started_audio:
                    self._emit(Clear())
                self._cancel(answer, TURN_DETECTED, report)
            case Close() if answer is not None:
                self._cancel(answer, TURN_DETECTED)
            case Announced() if self._unreported is not None:
                self._emit(self._unreported)
                self._unreported = None
        if (state := self.state) is not self._told:
            log.debug("floor: %s -> %s on %s", self._told.value, state.value, type(event).__name__)
        if SHOWN_STATE[state] != SHOWN_STATE[self._told]:
            self._emit(AgentState(SHOWN_STATE[state]))
        self._told = state

    def _cancel(self, answer: Answer, reason: str, report: bool = True) -> None:
        """A client hears that ``answer`` ended now, not once its stages have wound down."""
        self.answer = None
        answer.cancel(reason)
        if answer.number is None:
            return
        ended = ResponseEnded(answer.number, CANCELLED, reason)
        if report:
            self._emit(ended)
        else:
            self._unreported = ended
