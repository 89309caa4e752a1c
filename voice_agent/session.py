"""One conversation's turn taking: who has the floor, and the life of each answer.

The session is fed input events by a protocol codec and emits output events
through ``emit``; it never touches a socket. The parts it drives live beside
it: the user's audio and turns (:mod:`.listener`), the barge-in rule
(:mod:`.barge_in`), the history and prompt (:mod:`.conversation`), one spoken
answer (:mod:`.reply`). Whisper, the LLM and Piper run in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import log as logs
from .audio import PIPELINE_RATE
from .barge_in import BargeIn, BargeInPolicy
from .config import Settings
from .conversation import Conversation
from .echo import WHOLE_ECHO_SHARE
from .echo_reference import INPUT_SAMPLES as ECHO_INPUT_SAMPLES
from .echo_reference import EchoReference
from .engines import Engines
from .listener import PREROLL_SAMPLES, Listener
from .llm.base import LLMBackend, Message
from .llm.limited import TokenLimited
from .llm.scripted import ScriptedLLM
from .protocols.events import (
    NO_TOKEN_LIMIT,
    AgentAudio,
    AudioReceived,
    Clear,
    Error,
    InputClear,
    InputCleared,
    InputCommit,
    InputEvent,
    MarkPlayed,
    Metrics,
    OutputEvent,
    ProtocolError,
    ResponseCancel,
    ResponseEnded,
    ResponseRequest,
    ResponseStarted,
    SessionConfig,
    SessionStarted,
    SessionUpdate,
    SpeechStarted,
    StreamStopped,
    TextReceived,
    Transcript,
    Truncated,
    TruncateRequest,
    TurnCommitted,
    TurnDetection,
    TurnIgnored,
    UserText,
    UserTextAdded,
)
from .reply import Reply
from .turn import has_words
from .turn_detection import turn_taking
from .turn_signals import PauseSignals
from .user_turn import TurnMetrics, UserTurn

if TYPE_CHECKING:  # only a session with an agent uses them, and is handed them
    from .agent import CallContext
    from .agent_session import AgentSession

log = logging.getLogger(__name__)

APOLOGY = "Sorry, something went wrong on my side. Could you say that again?"
REMEMBERED_ANSWERS = 64  # answers a client may still truncate
# A turn that begins this soon after an answer ended may be that answer's echo
# coming back (the echo path, and the pre-roll kept before speech).
ECHO_TAIL_S = 1.0


def _timed_chunks(reply: Reply) -> list[tuple[str, float, float]]:
    """Each chunk of ``reply`` the user may have heard: its text, and its start and end in the answer's audio."""
    return [(c.text, c.start_s, c.end_s if c.end_s is not None else c.start_s + c.synthesized_s) for c in reply.chunks]


class TurnState(enum.Enum):
    """What the agent is doing; whether the user is speaking is ``Session``'s current ``UserTurn``."""

    LISTENING = "listening"  # no answer under way
    RESPONDING = "responding"  # a turn is committed: its transcript and answer are being prepared
    SPEAKING = "speaking"  # a reply is the one the user hears (it may be paused, or not have begun yet)


@dataclass
class _Answer:
    """The answer under way: to the spoken turn whose audio starts at ``turn_start``; None for text, fixed words."""

    turn_start: int | None
    turn_id: int | None = None  # the spoken turn it answers
    number: int | None = None  # its response number, once it plays (ResponseStarted)
    task: asyncio.Task | None = None
    reply: Reply | None = None  # set once it is the reply the user hears
    voiced_at: float | None = None  # when its first audio went out
    grace_taken = False  # the user went on within the grace: the next speech window's turn may withdraw it

    @property
    def heard_nothing(self) -> bool:
        return self.reply is None or not self.reply.started_audio

    def in_grace(self, now: float, grace_ms: float) -> bool:
        """Whether the user going on now means they were not done (the graceful way out)."""
        return self.turn_start is not None and self.voiced_at is not None and (now - self.voiced_at) * 1000 <= grace_ms


@dataclass
class _Spoken:
    """An answer a client may truncate to what it played."""

    reply: Reply
    message: Message | None = None  # its message in the history, once remembered
    cut_s: float | None = None  # a truncation that came while it still played


class Session:
    def __init__(
        self,
        engines: Engines,
        settings: Settings,
        emit: Callable[[OutputEvent], None],
        session_id: str = "",
        clock: Callable[[], float] = time.monotonic,
        agent: AgentSession | None = None,
    ):
        self.engines = engines
        self.settings = settings
        self.id = session_id
        self.agent = agent  # None: the plain assistant, and none of the agent's work on any path
        if agent is not None:
            emit = _recorded(emit, agent)
        self._send = emit
        self._clock = clock
        self._output = EchoReference(clock())  # what the client plays: its echo is not the user
        self.listener = Listener(
            settings, engines.vad.stream(), lambda: self.engines.stt, emit, self, session_id, clock
        )
        self.barge_in = BargeInPolicy.from_settings(settings)
        self.conversation = Conversation.from_settings(
            settings, lambda messages: self.engines.llm.prefill(messages), session_id
        )
        if agent is not None:
            self.conversation.system_prompt = agent.instructions
        self._answer: _Answer | None = None
        self._echo_heard = False  # the agent's own voice came back in this session
        self._finished: tuple[Reply, float] | None = None  # the last answer played to its end, and when
        self.overlap_ms_total = 0.0  # agent voice heard by a user who was not done, over the session
        self._input_seen = False
        self.closed = False
        # What a client may choose for itself (the Realtime protocol's session.update):
        # it changes a copy of the server's settings, so other sessions never see it.
        self._server_settings = settings
        self.voice = Path(getattr(engines.tts, "voice_path", "")).name.removesuffix(".onnx")
        self.turn_detection = turn_taking(settings, TurnDetection()).in_effect
        self._max_output_tokens = NO_TOKEN_LIMIT
        self._inputs: list[asyncio.Future[str]] = []  # user input not answered yet: text, committed turns
        self._answer_numbers = itertools.count(1)
        self._spoken: OrderedDict[int, _Spoken] = OrderedDict()
        self._cancel_reason = ""  # why the answer under way is cancelled, for ResponseEnded
        self._unreported_end: ResponseEnded | None = None  # an answer a new turn cancelled, told after it

    def _emit(self, event: OutputEvent) -> None:
        if isinstance(event, AgentAudio):
            self._output.played(event.samples, self.sample_rate, self._clock())
        elif isinstance(event, Clear):
            self._output.cleared(self._clock())
        self._send(event)

    @property
    def state(self) -> TurnState:
        if self._answer is None:
            return TurnState.LISTENING
        return TurnState.RESPONDING if self._answer.reply is None else TurnState.SPEAKING

    @property
    def answering(self) -> bool:
        """An answer (or fixed words) is being prepared or spoken: a graceful shutdown waits for it."""
        return self.state is not TurnState.LISTENING

    @property
    def sample_rate(self) -> int:
        return self.listener.sample_rate

    @property
    def history(self) -> list[Message]:
        return self.conversation.history

    @property
    def system_prompt(self) -> str:
        return self.conversation.system_prompt

    @property
    def _reply(self) -> Reply | None:
        return None if self._answer is None else self._answer.reply

    # Input.

    def handle(self, event: InputEvent) -> None:
        """Take one input event. Never blocks; long work goes to tasks."""
        if self.closed:
            return
        late_start = isinstance(event, SessionStarted) and self._input_seen
        self._input_seen |= isinstance(event, (SessionStarted, AudioReceived, TextReceived))
        if self.agent is not None and not late_start:
            self.agent.recorder.observe_input(event)
        if late_start:
            # Once, before any input: never a second greeting, nor a rate or prompt switch mid-answer.
            self._emit(Error("start_after_input", "start must come once, before any audio or text; ignored"))
        elif isinstance(event, AudioReceived):
            self.listener.feed(event.samples)
        elif isinstance(event, SessionStarted):
            self._on_start(event)
        elif isinstance(event, MarkPlayed):
            if self._reply is not None:
                self._reply.mark_played(event.name)
        elif isinstance(event, TextReceived):
            self._on_text(event.text)
        elif isinstance(event, StreamStopped):
            if self.listener.turn is not None:
                self.commit(self.listener.turn)
        elif isinstance(event, ProtocolError):
            log.warning("session %s: %s: %s", self.id, event.code, event.message)
            self._emit(Error(event.code, event.message, event.event_id))
        elif isinstance(event, SessionUpdate):
            self._on_update(event)
        elif isinstance(event, InputCommit):
            self._on_commit_request(event)
        elif isinstance(event, InputClear):
            self.listener.clear()
            self._emit(InputCleared())
        elif isinstance(event, UserText):
            self._inputs.append(_ready(event.text))
            self._emit(UserTextAdded(event.text))
        elif isinstance(event, ResponseRequest):
            self._on_response_request(event)
        elif isinstance(event, ResponseCancel):
            self._on_cancel(event)
        elif isinstance(event, TruncateRequest):
            self._on_truncate(event)

    def _on_start(self, event: SessionStarted) -> None:
        self.listener.set_sample_rate(event.sample_rate)
        if self.agent is not None:  # the agent's start hook decides what the client may change
            self.agent.begin(event.options, self._agent_started)
            return
        prompt = event.options.get("system_prompt")
        if isinstance(prompt, str) and prompt.strip():
            self.conversation.system_prompt = prompt.strip()
        greeting = event.options.get("greeting")
        if isinstance(greeting, str) and greeting.strip():
            self._say(greeting.strip())

    def _agent_started(self, context: CallContext) -> None:
        """The agent's start hook has decided this session's instructions and greeting."""
        self.conversation.system_prompt = context.instructions
        if context.greeting.strip():
            self._say(context.greeting.strip())

    def _say(self, text: str) -> None:
        """Say fixed words (a greeting, an apology) as a reply that can be interrupted like any other."""
        self._speak(self._new_reply(0, "", ScriptedLLM(text), [], None))

    def _speak(self, reply: Reply) -> None:
        """Run ``reply`` from scratch and let the user hear it."""
        answer = self._answer = _Answer(turn_start=None)
        answer.task = asyncio.create_task(self._play(answer, reply, asyncio.create_task(reply.run())))

    def _on_text(self, text: str) -> None:
        self._interrupt()
        turn_id = next(self.listener.turn_ids)
        metrics = TurnMetrics(turn_id, speech_end=self._clock())
        self._emit(Transcript("user", text, final=True))
        if self.agent is not None:
            self.agent.user_turn(text)
        self._speak(self._new_reply(turn_id, text, self.engines.llm, self.conversation.messages_for(text), metrics))

    # Turn taking: what the listener asks.

    def begin_turn(self, start: int) -> tuple[int, bool]:
        answer = self._answer
        if answer is not None and answer.heard_nothing:
            # The user went on before the agent said anything: one turn, not two.
            if answer.turn_start is not None:
                start = answer.turn_start
            if answer.turn_id is not None:
                self._emit(TurnIgnored(answer.turn_id, merged=True))
            self._cancel_reason = "turn_detected"
            # The client hears of the new turn first, then of the answer it cancelled (_announce).
            self._cancel_answer(report=False)
        elif (
            answer is not None
            and answer.reply is not None
            and not self._echo_heard  # on a speakerphone its own voice would withdraw every answer
            and answer.in_grace(self._clock(), self.settings.reply_grace_ms)
        ):
            # The user goes on right after the agent began: they were only pausing.
            # Silent at once; if it is words, the answer is withdrawn (user_speaks).
            answer.reply.pause()
            answer.grace_taken = True
        return start, self.state is TurnState.SPEAKING

    def unanswered_start(self) -> int | None:
        answer = self._answer
        if answer is None or not (answer.heard_nothing or answer.in_grace(self._clock(), self.settings.reply_grace_ms)):
            return None
        return answer.turn_start

    def hears_own_voice(self, end: int) -> bool:
        if not self.settings.barge_in_ignore_echo:
            return False
        timeline = self.listener.timeline
        heard = timeline.slice(end - ECHO_INPUT_SAMPLES, end)
        return self._output.explains(heard, timeline.arrival_time(end))

    def user_speaks(self, turn: UserTurn) -> None:
        """Interrupt the agent for real speech, not for "mm-hm" or a cough (:mod:`.barge_in`)."""
        if not turn.over_agent:
            self._announce(turn)
        if self._answer is None or self._reply is None or not self.turn_detection.interrupt_response:
            return
        if self._answer.grace_taken:
            self._answer.grace_taken = False
            turn.may_withdraw = True
        checking = turn.barge_check is not None and not turn.barge_check.done()
        echo_heard = self._echo_heard and not turn.may_withdraw
        action = self.barge_in.decide(turn.speech_ms, turn.barge_checked_ms, checking, echo_heard)
        if action is BargeIn.INTERRUPT:
            self._yield_to(turn, "")
        elif action is not BargeIn.NONE:
            if action is not BargeIn.LISTEN:
                self._reply.pause()  # fall silent at once, as a person would, while the words are checked
            if action in (BargeIn.CHECK, BargeIn.LISTEN):
                turn.barge_checked_ms = turn.speech_ms
                turn.barge_check = asyncio.create_task(self._check_barge_in(turn, turn.audio()))

    async def _check_barge_in(self, turn: UserTurn, audio: np.ndarray) -> None:
        try:
            text = await self.engines.stt.transcribe(audio)
        except Exception:
            log.exception("session %s: barge-in transcription failed", self.id)
            text = "?"  # unknown words: treat as speech
        if self._reply is None:
            return
        if self.settings.barge_in_ignore_echo and self._is_own_voice(turn, text):
            log.log(logs.words_level(), "session %s: the agent's own voice: %r", self.id, text)
            self._echo_heard = True
            self._reply.resume()
            return
        if self.barge_in.is_backchannel(text):
            log.log(logs.words_level(), "session %s: not an interruption: %r", self.id, text)
            self._reply.resume()
            return
        self._yield_to(turn, text)
        if self.listener.turn is not turn:
            self.commit(turn)  # it ended while we listened: answer it now that the agent is quiet

    def _echoes_last_answer(self, turn: UserTurn, text: str) -> bool:
        """A "turn" that began as the last answer's final words came back (a speakerphone's echo tail)."""
        if not self.settings.barge_in_ignore_echo or self._finished is None:
            return False
        reply, ended_at = self._finished
        began_at = self.listener.timeline.arrival_time(turn.start)
        if began_at > ended_at + ECHO_TAIL_S:
            return False
        spoken_s = (turn.last_speech - turn.start) / PIPELINE_RATE
        return self.barge_in.is_own_voice(text, _timed_chunks(reply), reply.heard_s(), spoken_s, WHOLE_ECHO_SHARE)

    def _is_own_voice(self, turn: UserTurn, text: str) -> bool:
        reply = self._reply
        if reply is None:
            return False
        spoken_s = (turn.last_speech - turn.start) / PIPELINE_RATE
        return self.barge_in.is_own_voice(text, _timed_chunks(reply), reply.heard_s(), spoken_s)

    def _yield_to(self, turn: UserTurn, text: str) -> None:
        log.info("session %s: barge-in after %.0f ms of speech", self.id, turn.speech_ms)
        log.log(logs.words_level(), "session %s: the words that interrupted: %r", self.id, text)
        turn.over_agent = False
        self._announce(turn)
        self._cancel_reason = "turn_detected"
        if turn.may_withdraw and self._answer is not None and self._answer.turn_start is not None:
            self._withdraw(turn, self._answer.turn_start)
        else:
            self._interrupt()

    def _withdraw(self, turn: UserTurn, answered_start: int) -> None:
        """The graceful way out: the user was not done. The answer goes, and both parts become one turn."""
        reply = self._reply
        if self._answer is not None and self._answer.turn_id is not None:
            self._emit(TurnIgnored(self._answer.turn_id, merged=True))  # its words are this turn's now
        self._cancel_answer()
        overlap_ms = 0.0 if reply is None else reply.heard_s() * 1000.0
        self.overlap_ms_total += overlap_ms
        log.info("session %s: answer withdrawn, the user goes on (%.0f ms of it heard)", self.id, overlap_ms)
        self._emit(Clear())
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
        turn.may_withdraw = False

    def _interrupt(self) -> None:
        """Stop the agent now: every stage, the client's buffer, and the history."""
        reply = self._reply
        if reply is not None and reply.started_audio:
            self._emit(Clear())
            heard = reply.heard_text()
            self._emit(Transcript("agent", heard, final=True))
            self._remember(reply, heard, interrupted=True)
        elif reply is not None and self.agent is not None:
            self._remember(reply, "", interrupted=True)  # its tool calls happened: they stay in the history
        self._cancel_answer()

    def _cancel_answer(self, report: bool = True) -> asyncio.Task | None:
        """Cancel the answer under way; a client hears that it ended now, not once its stages have wound down."""
        answer, self._answer = self._answer, None
        if answer is None:
            return None
        if answer.number is not None:
            ended = ResponseEnded(answer.number, "cancelled", self._cancel_reason)
            if report:
                self._emit(ended)
            else:
                self._unreported_end = ended
        if answer.task is not None:
            answer.task.cancel()
        return answer.task

    def commit(self, turn: UserTurn) -> None:
        if self.listener.turn is turn:
            self.listener.turn = None
        if self._reply is not None:  # SPEAKING
            if turn.barge_check is not None and not turn.barge_check.done():
                return  # the pending barge-in check decides, and commits the turn if it interrupts
            # Speech over the agent that never reached barge-in: a backchannel or noise.
            log.debug("session %s: ignoring %.0f ms of speech over the agent", self.id, turn.speech_ms)
            self._reply.resume()
            return
        self._announce(turn)
        self._emit(TurnCommitted(turn.id, turn.last_speech * 1000 // PIPELINE_RATE))
        metrics = turn.metrics or TurnMetrics(turn.id)
        metrics.record_decision(turn)
        timeline = self.listener.timeline
        metrics.speech_end = timeline.arrival_time(timeline.refine_end(turn.last_speech))
        metrics.endpoint_ms = (self._clock() - metrics.speech_end) * 1000.0
        answer = self._answer = _Answer(turn_start=turn.start, turn_id=turn.id)
        answer.task = asyncio.create_task(self._respond(answer, turn, metrics))

    # The answer.

    async def _respond(self, answer: _Answer, turn: UserTurn, metrics: TurnMetrics) -> None:
        try:
            text = await turn.final_transcript(metrics)
        except Exception as exc:
            log.exception("session %s: transcription failed", self.id)
            self._emit(Error("stt_failed", f"transcription failed: {type(exc).__name__}"))
            self._answer = None
            self._say(APOLOGY)
            return
        if not has_words(text) or (turn.over_agent and self.barge_in.is_backchannel(text)):
            log.log(logs.words_level(), "session %s: turn %d had no words for the agent: %r", self.id, turn.id, text)
            self._answer = None
            self._emit(TurnIgnored(turn.id))
            return
        if self._echoes_last_answer(turn, text):
            log.log(logs.words_level(), "session %s: turn %d was the agent's own voice: %r", self.id, turn.id, text)
            self._echo_heard = True
            self._answer = None
            return
        self._emit(Transcript("user", text, final=True))
        if self.agent is not None:
            self.agent.user_turn(text)
            speech_start = min(turn.start + PREROLL_SAMPLES, turn.last_speech)
            self.agent.recorder.user_speech(speech_start / PIPELINE_RATE, turn.last_speech / PIPELINE_RATE)
        if not self.turn_detection.create_response:
            self._answer = None
            self._inputs.append(_ready(text))  # answered when the client asks for a response
            return
        if typed := self._take_typed():  # text the client added since the last answer is asked with the turn
            text = f"{typed} {text}"
            turn.drop_prepared()
        if (prepared := turn.prepared()) is not None:
            reply, running = prepared
            metrics.preemptive = True
        else:
            turn.drop_prepared()
            reply = self._new_reply(turn.id, text, self.engines.llm, self.conversation.messages_for(text), metrics)
            running = asyncio.create_task(reply.run())
        await self._play(answer, reply, running)

    def user_pauses(self, turn: UserTurn, text: str, stt_ms: float) -> None:
        """Ask the end-of-turn signals about the speculative transcript, and start answering it, held back."""
        if self._echoes_last_answer(turn, text):
            return  # nothing to prepare: the commit drops it
        prepare = (
            self.settings.preemptive_generation
            and has_words(text)
            and turn.needs_answer
            and self.state is not TurnState.SPEAKING  # speech over the agent: only a barge-in makes it a turn
        )
        if turn.needs_signals and has_words(text) and self.state is not TurnState.SPEAKING:
            # With an answer prepared, the LLM reads the signal in the answer's own prompt
            # evaluation: no second evaluation, and the answer never waits for it.
            turn.gather(
                PauseSignals(
                    text,
                    self.conversation.agent_last_words(),
                    self.engines.llm if self.settings.end_of_turn_llm else None,
                    self.conversation.messages_for(text),
                    self.engines.smart_turn,
                    None
                    if self.engines.smart_turn is None
                    else self.listener.timeline.slice(turn.start, self.listener.timeline.received),
                    answering=prepare,
                )
            )
        if not prepare:
            return
        metrics = TurnMetrics(turn.id, stt_final_ms=stt_ms)
        messages = self.conversation.messages_for(text)
        turn.prepare(self._new_reply(turn.id, text, self.engines.llm, messages, metrics, held=True), metrics)

    def _new_reply(
        self,
        turn: int,
        user_text: str,
        llm: LLMBackend,
        messages: list[Message],
        metrics: TurnMetrics | None,
        held: bool = False,
        max_tokens: int | None = None,
    ) -> Reply:
        tts = self.engines.tts
        # Fixed words (a greeting, an apology: no user text) are said whole.
        max_sentences = self.settings.answer_max_sentences if user_text else 0
        answering = llm is self.engines.llm
        limit = self._max_output_tokens if max_tokens is None else max_tokens
        if self.agent is not None:
            if answering:
                llm = self.agent.llm(llm, turn, held)  # its tool rounds are not cut at a count of deltas
                max_sentences = self.agent.sentence_limit(max_sentences)
            tts = self.agent.tts or tts
        elif limit != NO_TOKEN_LIMIT and answering:
            llm = TokenLimited(llm, limit)
        return Reply(
            llm=llm,
            tts=tts,
            messages=messages,
            output_rate=self.sample_rate,
            lead_s=self.settings.output_lead_ms / 1000.0,
            emit=self._emit,
            turn=turn,
            user_text=user_text,
            first_chunk_min_words=self.settings.first_chunk_min_words,
            phrase_breaks=self.settings.first_chunk_phrase_breaks,
            max_sentences=max_sentences,
            on_first_audio=None if metrics is None else (lambda reply: self._report(reply, metrics)),
            held=held,
            clock=self._clock,
        )

    async def _play(self, answer: _Answer, reply: Reply, running: asyncio.Task) -> None:
        """Make ``reply`` the one the user hears, and wait for it to end.

        Cancelling this task cancels ``running`` too: asyncio cancels what a cancelled task awaits.
        """
        answer.reply = reply
        number = answer.number = next(self._answer_numbers)
        self._spoken[number] = _Spoken(reply)
        while len(self._spoken) > REMEMBERED_ANSWERS:
            self._spoken.popitem(last=False)
        self._emit(ResponseStarted(number))
        reply.resume()
        if self.agent is not None:
            self.agent.release(reply.turn)
        failed = False
        try:
            await running
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a stage failed: tell the client, keep the session
            log.exception("session %s: reply failed", self.id)
            self._emit(Error("reply_failed", f"the answer failed: {type(exc).__name__}"))
            failed = True
        if self._answer is answer:  # else it was cancelled, and said so
            self._finished = (reply, self._clock())
            self._emit(Transcript("agent", reply.text, final=True))
            self._remember(reply, reply.text)
            self._answer = None
            self._emit(ResponseEnded(number, "failed" if failed else "completed"))
            # Apologize for a failed answer to the user; never for fixed words, so no loop.
            if failed and reply.user_text:
                self._say(APOLOGY)

    def _remember(self, reply: Reply, heard: str, interrupted: bool = False) -> None:
        tool_messages: list[Message] = []
        if self.agent is not None:
            tool_messages = self.agent.answer_ended(reply.turn, heard, interrupted)
            if interrupted and not reply.started_audio and not tool_messages:
                return  # nothing was said or done
        message = self.conversation.remember(reply.user_text, heard, tool_messages)
        spoken = next((s for s in reversed(self._spoken.values()) if s.reply is reply), None)
        if spoken is not None:
            spoken.message = message
            if spoken.cut_s is not None and spoken.cut_s < reply.heard_s():
                self.conversation.truncate(message, reply.text_until(spoken.cut_s))

    def _report(self, reply: Reply, metrics: TurnMetrics) -> None:
        if self._answer is not None and self._answer.reply is reply:
            self._answer.voiced_at = reply.timings.first_audio_at
        values = metrics.values(reply.timings)
        log.info("session %s: metrics %s", self.id, values)
        self._emit(Metrics(values))

    # What a Realtime client controls itself.

    def _announce(self, turn: UserTurn) -> None:
        """Tell the client a user turn began; over the agent, only once it interrupts."""
        if not turn.announced:
            turn.announced = True
            self._emit(SpeechStarted(turn.id, turn.start * 1000 // PIPELINE_RATE))
        if self._unreported_end is not None:
            self._emit(self._unreported_end)
            self._unreported_end = None

    def _on_update(self, event: SessionUpdate) -> None:
        if event.sample_rate is not None and event.sample_rate != self.sample_rate:
            self.listener.set_sample_rate(event.sample_rate)
        if event.instructions is not None:
            self.conversation.system_prompt = event.instructions
        if event.voice is not None and event.voice != self.voice:
            message = f"unknown voice {event.voice!r}; this server has {self.voice!r}, which the session keeps"
            self._emit(Error("invalid_voice", message, event.event_id))
        if event.turn_detection is not None:
            self._set_turn_detection(event.turn_detection)
        if event.max_output_tokens is not None:
            self._max_output_tokens = event.max_output_tokens
        self._emit(
            SessionConfig(
                self.conversation.system_prompt,
                self.voice,
                self.turn_detection,
                self._max_output_tokens,
                self.sample_rate,
            )
        )

    def _set_turn_detection(self, detection: TurnDetection) -> None:
        taking = turn_taking(self._server_settings, detection)
        self.settings = taking.settings
        self.listener.configure(taking.settings, taking.preroll_samples, taking.manual)
        self.turn_detection = taking.in_effect

    def _on_commit_request(self, event: InputCommit) -> None:
        if not self.listener.manual:
            if self.listener.turn is None:
                self._emit(Error("input_audio_buffer_commit_empty", "no speech to commit", event.event_id))
            else:
                self.commit(self.listener.turn)
            return
        span = self.listener.take_buffer()
        if span is None:
            message = "the input audio buffer holds less than 100 ms of audio"
            self._emit(Error("input_audio_buffer_commit_empty", message, event.event_id))
            return
        turn_id = next(self.listener.turn_ids)
        self._emit(TurnCommitted(turn_id, span[1] * 1000 // PIPELINE_RATE))
        audio = self.listener.timeline.slice(*span)
        self._inputs.append(asyncio.create_task(self._transcribe_committed(turn_id, audio)))

    async def _transcribe_committed(self, turn_id: int, audio: np.ndarray) -> str:
        """The words of a turn the client committed; they are answered when it asks for a response."""
        try:
            text = await self.engines.stt.transcribe(audio)
        except Exception as exc:
            log.exception("session %s: transcription failed", self.id)
            self._emit(Error("stt_failed", f"transcription failed: {type(exc).__name__}"))
            text = ""
        if has_words(text):
            self._emit(Transcript("user", text, final=True))
        else:
            self._emit(TurnIgnored(turn_id))
        return text

    def _take_typed(self) -> str:
        """The words of user input waiting for an answer that are known already, taken off the queue."""
        ready = [item for item in self._inputs if item.done() and not item.cancelled() and item.exception() is None]
        self._inputs = [item for item in self._inputs if item not in ready]
        return " ".join(t for t in (item.result() for item in ready) if has_words(t))

    def _on_response_request(self, event: ResponseRequest) -> None:
        if self._answer is not None:
            message = "a response is in progress; cancel it or wait for response.done"
            self._emit(Error("conversation_already_has_active_response", message, event.event_id))
            return
        inputs, self._inputs = self._inputs, []
        answer = self._answer = _Answer(turn_start=None)
        answer.task = asyncio.create_task(self._answer_request(answer, inputs, event))

    async def _answer_request(self, answer: _Answer, inputs: list[asyncio.Future[str]], request: ResponseRequest):
        metrics = TurnMetrics(next(self.listener.turn_ids), speech_end=self._clock())
        texts = []
        for item in inputs:
            with contextlib.suppress(Exception):  # a failed transcription was reported already
                texts.append(await item)
        text = " ".join(t for t in texts if has_words(t))
        messages = self.conversation.messages_for(text, request.instructions)
        reply = self._new_reply(
            metrics.turn, text, self.engines.llm, messages, metrics, max_tokens=request.max_output_tokens
        )
        await self._play(answer, reply, asyncio.create_task(reply.run()))

    def _on_cancel(self, event: ResponseCancel) -> None:
        if self._answer is None:
            self._emit(Error("response_cancel_not_active", "there is no response to cancel", event.event_id))
            return
        self._cancel_reason = "client_cancelled"
        self._interrupt()

    def _on_truncate(self, event: TruncateRequest) -> None:
        spoken = self._spoken.get(event.response)
        if spoken is None:
            self._emit(Error("item_not_found", "that answer is no longer known to the server", event.event_id))
            return
        seconds = event.audio_end_ms / 1000.0
        if seconds > spoken.reply.sent_s + 0.001:
            message = f"audio_end_ms {event.audio_end_ms} is past the {spoken.reply.sent_s * 1000:.0f} ms of audio sent"
            self._emit(Error("invalid_value", message, event.event_id))
            return
        text = spoken.reply.text_until(seconds)
        if spoken.message is not None:
            self.conversation.truncate(spoken.message, text)
        else:
            spoken.cut_s = seconds
        self._emit(Truncated(event.response, event.audio_end_ms, text))

    async def close(self) -> None:
        """Stop everything this session started."""
        self.closed = True
        for item in self._inputs:
            item.cancel()
        if (task := self._cancel_answer()) is not None:
            await asyncio.gather(task, return_exceptions=True)
        await self.listener.close()
        await self.conversation.close()
        if self.agent is not None:
            await self.agent.close()


def _recorded(emit: Callable[[OutputEvent], None], agent: AgentSession) -> Callable[[OutputEvent], None]:
    """``emit``, with every event shown to the agent's session recorder first."""

    def emit_recorded(event: OutputEvent) -> None:
        agent.recorder.observe_output(event)
        emit(event)

    return emit_recorded


def _ready(text: str) -> asyncio.Future[str]:
    """Input whose words are known already (typed text, a turn transcribed before it was asked about)."""
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    future.set_result(text)
    return future
