"""The agent's side of the floor: one state machine, the only code that starts, pauses, resumes or ends an answer.

LISTENING (no answer), PREPARING (nothing plays yet), SPEAKING (the grace runs
from its first audio) and PAUSED (SPEAKING, held by one :class:`~.answer.Hold`
or more). An answer ends completed, failed, or cancelled: yielded (what was
heard stays in the history), withdrawn (the user was not done) or closed.
Every change comes in as an event to :meth:`Floor.transition`, and what the
client is told of it (``clear``, the response's start and end, ``agent_state``)
goes out from there.
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
SHOWN_STATE = {"listening": "listening", "preparing": "thinking", "speaking": "speaking", "paused": "speaking"}


@dataclass(frozen=True)
class Prepare:  # the answer under way now
    answer: Answer


@dataclass(frozen=True)
class Play:  # the reply the user hears of the answer
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
class HandOver:  # ``to`` takes over ``holder``'s pause, with no frame let out between
    answer: Answer | None
    holder: Hold
    to: Hold


@dataclass(frozen=True)
class Finish:  # played to its end, or failed
    answer: Answer
    failed: bool


@dataclass(frozen=True)
class Drop:  # ends without a response: its turn was none of the agent's business, or the client answers it
    answer: Answer


@dataclass(frozen=True)
class Yield:  # the user (or the client: reason) takes the floor; what was heard stays in the history
    reason: str = TURN_DETECTED


@dataclass(frozen=True)
class Withdraw:  # the user was not done: the answer goes; report=False: its end is told once the new turn is
    report: bool = True


@dataclass(frozen=True)
class Close:
    pass


@dataclass(frozen=True)
class Announced:  # the client was told of a new user turn: the end of an answer it withdrew follows
    pass


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
        if SHOWN_STATE[state.value] != SHOWN_STATE[self._told.value]:
            self._emit(AgentState(SHOWN_STATE[state.value]))
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
