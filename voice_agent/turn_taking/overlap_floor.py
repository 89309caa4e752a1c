"""What the barge-in checks read of the session, and the few ways they hand the floor over."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..config import Settings
from ..engines.loader import Engines
from ..engines.stt_queue import SessionSTT
from ..protocols.events import TURN_DETECTED, OutputEvent, TurnDetection
from .answer import Answer
from .floor import Floor
from .listener import Listener
from .user_turn import UserTurn


class TurnDetectionInEffect(Protocol):
    turn_detection: TurnDetection


class Withdrawal(Protocol):
    """The graceful way out (:class:`~.turn_merge.TurnMerge`), for a turn that interrupts."""

    def began_in_grace(self, turn: UserTurn) -> bool: ...

    def take_grace(self, answer: Answer) -> bool: ...

    def withdraw(self, turn: UserTurn, answered_start: int) -> None: ...


class OverlapFloor(Protocol):
    """What the barge-in checks read of the session, and the few ways they hand the floor over."""

    id: str
    engines: Engines
    clock: Callable[[], float]
    stt: SessionSTT
    listener: Listener

    @property
    def settings(self) -> Settings: ...

    @property
    def control(self) -> TurnDetectionInEffect: ...

    @property
    def merge(self) -> Withdrawal: ...

    floor: Floor

    @property
    def sample_rate(self) -> int: ...

    def emit(self, event: OutputEvent) -> None: ...

    def announce(self, turn: UserTurn) -> None: ...

    def interrupt(self, reason: str = TURN_DETECTED) -> None: ...

    def commit(self, turn: UserTurn) -> None: ...
