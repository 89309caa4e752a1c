"""Gathers the end-of-turn signals for one pause, off the event loop.

When the speculative transcript of a pause is in, the session asks the LLM
how likely the words end the turn and, if loaded, Smart Turn how finished the
voice sounds; both run in their engines' threads while the pause goes on.
The decision reads them at each VAD window, and again the moment a signal
arrives (``UserTurn``'s ``on_news``), with ``current``: while one is still out, the
words wait as if not in yet (``TurnDetector.required_silence_ms``), bounded by
the longest silence, so that a transcript that came late under load is
decided on the same signals as at one session.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from ..engines.llm.base import LLMBackend, Message
from ..engines.smart_turn import SmartTurn
from .dialogue_state import answer_completeness, asks_for_answer, expectation
from .turn import TurnSignals

log = logging.getLogger(__name__)


class PauseSignals:
    """The signals about one transcript of the user's words so far."""

    def __init__(
        self,
        text: str,
        agent_text: str | None,
        llm: LLMBackend | None,
        messages: list[Message],
        smart_turn: SmartTurn | None,
        audio: np.ndarray | None,  # the turn's audio so far, for smart_turn
        answering: bool = False,  # an answer to ``messages`` is starting: the LLM reads the signal on its way
    ):
        self.text = text
        self.answer = answer_completeness(expectation(agent_text), text)
        self.agent_asked = asks_for_answer(agent_text)
        started = time.monotonic()
        self.llm_ms: float | None = None  # how long the LLM's answer took, for the turn's metrics
        self._llm: asyncio.Task | None = None
        self._audio: asyncio.Task | None = None
        if llm is not None:
            self._llm = asyncio.create_task(llm.end_of_turn_logprob(messages, answering=answering))
            self._llm.add_done_callback(lambda _: setattr(self, "llm_ms", (time.monotonic() - started) * 1000.0))
            self._llm.add_done_callback(_log_failure)
        if smart_turn is not None and audio is not None:
            self._audio = asyncio.create_task(smart_turn.complete_probability(audio))
            self._audio.add_done_callback(_log_failure)

    def current(self) -> TurnSignals:
        return TurnSignals(
            self.text,
            end_of_turn_logprob=_result(self._llm),
            answer=self.answer,
            audio_end_probability=_result(self._audio),
            agent_asked=self.agent_asked,
            pending=any(not task.done() for task in self.tasks()),
        )

    def cancel(self) -> None:
        for task in (self._llm, self._audio):
            if task is not None:
                task.cancel()

    def tasks(self) -> list[asyncio.Task]:
        return [task for task in (self._llm, self._audio) if task is not None]


def _result(task: asyncio.Task | None) -> float | None:
    if task is None or not task.done() or task.cancelled() or task.exception() is not None:
        return None
    return task.result()


def _log_failure(task: asyncio.Task) -> None:
    """Once per signal, not at every VAD window that reads it: the decision goes on without it."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("end-of-turn signal failed: %r", task.exception())
