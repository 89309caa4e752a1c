"""Builds each answer's :class:`~.reply.Reply`: its engines, its limits, and the metrics it reports."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ..config import Settings
from ..engines.llm.base import LLMBackend, Message, supports_tools
from ..engines.llm.limited import TokenLimited
from ..engines.loader import Engines
from ..protocols.events import NO_TOKEN_LIMIT, Metrics, OutputEvent
from ..reply.pipeline import Reply, ReplyTimings
from .client_tools import ClientToolTurn, ToolOffer

if TYPE_CHECKING:  # only a session with an agent has one
    from .agent_session import AgentSession

log = logging.getLogger(__name__)


@dataclass
class TurnMetrics:
    turn: int
    speech_end: float = 0.0  # monotonic arrival time of the last speech sample
    endpoint_ms: float = 0.0
    stt_final_ms: float = 0.0
    stt_speculative: bool = False
    preemptive: bool = False
    end_silence_ms: float | None = None  # the silence the end-of-turn signals asked for
    end_of_turn_logprob: float | None = None
    end_of_turn_llm_ms: float | None = None

    def values(self, timings: ReplyTimings) -> dict[str, float | bool | None]:
        """What a ``metrics`` event reports once the answer's first audio is out."""
        assert timings.first_audio_at is not None  # reported on the first audio
        return {
            "turn": self.turn,
            "voice_to_voice_ms": _round((timings.first_audio_at - self.speech_end) * 1000.0),
            "endpoint_ms": _round(self.endpoint_ms),
            "stt_final_ms": _round(self.stt_final_ms),
            "stt_speculative": self.stt_speculative,
            "preemptive": self.preemptive,
            "llm_ttft_ms": _round(timings.llm_ttft_ms),
            "first_chunk_ms": _round(timings.first_chunk_ms),
            "tts_ttfa_ms": _round(timings.tts_ttfa_ms),
            "end_silence_ms": _round(self.end_silence_ms),
            "end_of_turn_logprob": None if self.end_of_turn_logprob is None else round(self.end_of_turn_logprob, 2),
            "end_of_turn_llm_ms": _round(self.end_of_turn_llm_ms),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


class ReplyFactory:
    def __init__(
        self,
        engines: Engines,
        settings: Callable[[], Settings],
        output_rate: Callable[[], int],
        emit: Callable[[OutputEvent], None],
        agent: AgentSession | None = None,
        session_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ):
        # Settings and the output rate are read per reply: a Realtime client may change them mid-session.
        self._engines = engines
        self._settings = settings
        self._output_rate = output_rate
        self._emit = emit
        self._agent = agent
        self._id = session_id
        self._clock = clock
        self.max_output_tokens = NO_TOKEN_LIMIT  # the client's limit (session.update) for every answer
        self.tools: ToolOffer | None = None  # the client's functions (session.update) for every answer

    def new(
        self,
        turn: int,
        user_text: str,
        llm: LLMBackend,
        messages: list[Message],
        metrics: TurnMetrics | None,
        held: bool = False,
        max_tokens: int | None = None,
        tools: ToolOffer | None = None,
    ) -> Reply:
        """A reply to ``user_text`` from ``llm``; fixed words (no user text, a scripted LLM) are said whole.

        ``tools``: the client's functions for this answer instead of the session's."""
        settings = self._settings()
        tts = self._engines.tts
        max_sentences = settings.answer_max_sentences if user_text else 0
        answering = llm is self._engines.llm
        limit = self.max_output_tokens if max_tokens is None else max_tokens
        offer = self.tools if tools is None else tools
        if offer is not None and not (offer.schemas and supports_tools(llm)):
            offer = None
        if self._agent is not None:
            if answering:
                llm = self._agent.llm(llm, turn, held, offer)  # its tool rounds are not cut at a count of deltas
                max_sentences = self._agent.sentence_limit(max_sentences)
            tts = self._agent.tts or tts
        else:
            if offer is not None and answering:
                llm = cast(LLMBackend, ClientToolTurn(llm, offer))  # a reply only streams from it
            if limit != NO_TOKEN_LIMIT and answering:
                llm = TokenLimited(llm, limit)
        return Reply(
            llm=llm,
            tts=tts,
            messages=messages,
            output_rate=self._output_rate(),
            lead_s=settings.output_lead_ms / 1000.0,
            emit=self._emit,
            turn=turn,
            user_text=user_text,
            first_chunk_min_words=settings.first_chunk_min_words,
            phrase_breaks=settings.first_chunk_phrase_breaks,
            max_sentences=max_sentences,
            on_first_audio=None if metrics is None else (lambda reply: self._report(reply, metrics)),
            held=held,
            first_chunks=self._engines.first_chunks if settings.first_chunks_first else None,
            clock=self._clock,
        )

    def _report(self, reply: Reply, metrics: TurnMetrics) -> None:
        values = metrics.values(reply.timings)
        log.info("session %s: metrics %s", self._id, values)
        self._emit(Metrics(values))
