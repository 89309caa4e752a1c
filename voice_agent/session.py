"""One conversation's turn taking: who has the floor, and the life of each answer.

Fed input events by a protocol codec, it emits output events through ``emit``
and never touches a socket. The parts beside it are listed in docs/session.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from .agent.conversation import Conversation
from .agent.idle_wait import IdleWait
from .agent.reply_factory import ReplyFactory, TurnMetrics
from .audio import PIPELINE_RATE
from .config import Settings
from .engines.llm.base import Message, ToolCall
from .engines.llm.markup import chat_markup
from .engines.llm.scripted import ScriptedLLM
from .engines.llm.tokens import token_counter
from .engines.loader import Engines
from .log import log_exception
from .protocols.events import (
    AudioReceived,
    Error,
    FunctionCall,
    FunctionCallOutput,
    HistoryMessage,
    InputEvent,
    MarkPlayed,
    OutputEvent,
    ProtocolError,
    SessionStarted,
    StreamStopped,
    TextReceived,
    Transcript,
    TurnCommitted,
    UserText,
)
from .reply.pipeline import Reply
from .turn_taking.answer import Answer
from .turn_taking.barge_in import BargeInPolicy
from .turn_taking.client_control import CLIENT_CONTROL_EVENTS, ClientControl
from .turn_taking.floor import Close, Drop, Finish, Floor, Play, Prepare, Yield
from .turn_taking.interruptions import Interruptions
from .turn_taking.listener import Listener
from .turn_taking.own_voice import SessionParts
from .turn_taking.turn import has_words
from .turn_taking.turn_signals import PauseSignals
from .turn_taking.user_turn import UserTurn

if TYPE_CHECKING:  # only a session with an agent uses them, and is handed them
    from .agent.agent_session import AgentSession

log = logging.getLogger(__name__)

APOLOGY = "Sorry, something went wrong on my side. Could you say that again?"
MODEL_MARKUP = "text holds one of the model's special tokens (chat-template markup); ignored"
# What a client is told of a failed answer: the details (the exception) are in the server's log only.
REPLY_FAILED = "the answer failed on the server; it is not kept in the conversation"


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
        self.id = session_id
        self.agent = agent  # None: the plain assistant, and none of the agent's work on any path
        self.clock = clock
        self.idle = IdleWait(lambda: self.control.turn_detection.idle_timeout_ms, lambda: self.control.idle())
        self._send = emit if agent is None else agent.recorded(emit)
        self.floor = Floor(self.emit, self._cut_off)
        self.stt = engines.stt_queue.session(session_id)  # this session's Whisper calls, in turn with the others'
        parts = SessionParts(
            lambda: self.listener,
            self.stt,
            engines.vad,
            BargeInPolicy.from_settings(settings),
            lambda: self.settings,
            lambda: self.sample_rate,
            self.emit,
            clock,
            session_id,
        )
        self.interruptions = Interruptions(
            self.floor, parts, lambda: self.control.turn_detection.interrupt_response, self.commit
        )
        self.listener = Listener(
            settings, engines.vad.stream(), lambda: self.stt, self.emit, self, self.interruptions, session_id, clock
        )
        self.conversation = Conversation.from_settings(
            settings, lambda messages: self.engines.llm.prefill(messages), session_id, token_counter(engines.llm)
        )
        if agent is not None:
            self.conversation.system_prompt = agent.instructions
        self.replies = ReplyFactory(
            engines, lambda: self.settings, lambda: self.sample_rate, self.emit, agent, session_id, clock
        )
        self.control: ClientControl = ClientControl(
            settings,
            engines,
            self.listener,
            self.stt,
            self.conversation,
            self.replies,
            self.floor,
            self.emit,
            agent,
            self.say,
            self.commit,
            self.start_answer,
            self.play,
            session_id,
            clock,
        )
        self._input_seen = False
        self.closed = False

    def emit(self, event: OutputEvent) -> None:
        """Send ``event``, seen first by the agent's own-voice hearing and the input's echo canceller (what the
        client plays and drops), and by the idle wait."""
        self.interruptions.see(event)
        if self.listener.echo_canceller is not None:
            self.listener.echo_canceller.output(event, self.sample_rate)
        self.idle.see(event)
        self._send(event)

    @property
    def settings(self) -> Settings:
        """The server's, as this session's client changed them (ClientControl): the listener's."""
        return self.listener.settings

    @property
    def answering(self) -> bool:
        """An answer (or fixed words) is being prepared or spoken: a graceful shutdown waits for it."""
        return self.floor.answer is not None

    @property
    def reply(self) -> Reply | None:
        """The reply the user hears, if any."""
        return self.floor.reply

    @property
    def sample_rate(self) -> int:
        return self.listener.sample_rate

    @property
    def history(self) -> list[Message]:
        return self.conversation.history

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
            self.emit(Error("start_after_input", "start must come once, before any audio or text; ignored"))
        elif isinstance(event, (TextReceived, UserText, HistoryMessage)) and chat_markup(self.engines.llm).find(
            event.text
        ):
            # The codecs refuse the <|...|> form; only the model knows the rest of its special tokens.
            self.emit(Error("invalid_text", MODEL_MARKUP, getattr(event, "event_id", "")))
        elif isinstance(event, FunctionCallOutput) and chat_markup(self.engines.llm).find(event.output):
            self.emit(Error("invalid_text", MODEL_MARKUP.replace("text", "the output", 1), event.event_id))
        elif isinstance(event, AudioReceived):
            self.listener.feed(event.samples)
        elif isinstance(event, SessionStarted):
            self.control.start(event)
        elif isinstance(event, MarkPlayed) and self.reply is not None:
            self.reply.mark_played(event.name)
        elif isinstance(event, TextReceived):
            self._on_text(event.text)
        elif isinstance(event, StreamStopped) and self.listener.turn is not None:
            self.commit(self.listener.turn)
        elif isinstance(event, ProtocolError):
            log.warning("session %s: %s: %s", self.id, event.code, event.message)
            self.emit(Error(event.code, event.message, event.event_id))
        elif isinstance(event, CLIENT_CONTROL_EVENTS):
            self.control.handle(event)

    def say(self, text: str) -> None:
        """Say fixed words (a greeting, an apology) as a reply that can be interrupted like any other."""
        self._speak(self.replies.new(0, "", ScriptedLLM(text), [], None))

    def _speak(self, reply: Reply) -> None:
        """Run ``reply`` from scratch and let the user hear it."""
        self.start_answer(lambda answer: self.play(answer, reply, asyncio.create_task(reply.run())))

    def _on_text(self, text: str) -> None:
        self.floor.transition(Yield())
        turn_id = next(self.listener.turn_ids)
        metrics = TurnMetrics(turn_id, speech_end=self.clock())
        self.emit(Transcript("user", text, final=True))
        if self.agent is not None:
            self.agent.user_turn(text)
        self._speak(self.replies.new(turn_id, text, self.engines.llm, self.conversation.messages_for(text), metrics))

    def _cut_off(self, reply: Reply) -> None:
        """The user took the floor from ``reply``: what they heard of it goes to the history."""
        if reply.started_audio:
            heard = reply.heard_text()
            self.emit(Transcript("agent", heard, final=True))
            self._remember(reply, heard, interrupted=True)
        elif self.agent is not None:
            self._remember(reply, "", interrupted=True)  # its tool calls happened: they stay in the history

    def commit(self, turn: UserTurn) -> None:
        self.listener.committed(turn)
        if self.reply is not None:  # over the agent: what it reads commits the turn if it interrupts
            self.interruptions.turn_ends(turn)
            return
        self.interruptions.announce(turn)
        self.emit(TurnCommitted(turn.id, turn.last_speech * 1000 // PIPELINE_RATE))
        metrics = turn.metrics or TurnMetrics(turn.id)
        turn.record_commit(metrics, self.clock())
        self.start_answer(lambda answer: self._respond(answer, turn, metrics), turn)

    # The answer.

    def start_answer(self, run: Callable[[Answer], Coroutine[Any, Any, None]], turn: UserTurn | None = None) -> None:
        """Make a new answer the one under way (to ``turn``), and run its preparation and playing."""
        self.control.answer_begins()
        answer = Answer(None) if turn is None else Answer(turn.start, turn.id)
        answer.start(run)
        self.floor.transition(Prepare(answer))

    async def _respond(self, answer: Answer, turn: UserTurn, metrics: TurnMetrics) -> None:
        try:
            await self._answer_turn(answer, turn, metrics)
        finally:  # a prepared answer never played is cancelled here, not closed by the GC from another thread
            turn.drop_prepared()

    async def _answer_turn(self, answer: Answer, turn: UserTurn, metrics: TurnMetrics) -> None:
        try:
            text = await turn.final_transcript(metrics)
        except Exception:
            log_exception(log, "session %s: transcription failed", self.id)
            self.emit(Error("stt_failed", "transcription failed on the server"))
            self.say(APOLOGY)  # in place of this answer
            return
        heard = await self.interruptions.words_without_echo(turn, text)
        if heard != text:
            turn.drop_prepared()  # it answers the words with the echo in them
            text = heard
        if self.interruptions.not_for_agent(turn, text):
            self.floor.transition(Drop(answer))
            return
        self.emit(Transcript("user", text, final=True))
        if self.agent is not None:
            self.agent.user_turn(text, (turn.speech_start / PIPELINE_RATE, turn.last_speech / PIPELINE_RATE))
        if not self.control.turn_detection.create_response:
            self.floor.transition(Drop(answer))
            self.control.items.add_text(text)  # answered when the client asks for a response
            return
        if typed := self.control.take_ready_input():  # text the client added since the last answer comes first
            text = f"{typed} {text}"
            turn.drop_prepared()
        if (prepared := turn.prepared()) is not None:
            reply, running = prepared
            metrics.preemptive = True
        else:
            turn.drop_prepared()  # now, not after: its LLM instance answers this one
            reply = self.replies.new(turn.id, text, self.engines.llm, self.conversation.messages_for(text), metrics)
            running = asyncio.create_task(reply.run())
        await self.play(answer, reply, running)

    def user_partial(self, turn: UserTurn, text: str) -> None:
        """Evaluate the words so far into the LLM's cache while the user speaks; not once they paused, when the
        answer to the pause's transcript is about to need the LLM."""
        if has_words(text) and self.reply is None and not turn.pausing:
            self.conversation.prefill_question(text)

    def user_pauses(self, turn: UserTurn, text: str, stt_ms: float) -> None:
        """Ask the end-of-turn signals about the speculative transcript, and start answering it, held back."""
        if self.interruptions.echoes_last_answer(turn, text):
            return  # nothing to prepare: the commit drops it
        words = has_words(text) and self.reply is None  # over the agent, only a barge-in makes a turn
        prepare = words and self.settings.preemptive_generation and turn.needs_answer
        if turn.needs_signals and words:
            # With an answer prepared, the LLM reads the signal in the answer's own prompt evaluation.
            timeline, smart_turn = self.listener.timeline, self.engines.smart_turn
            audio = None if smart_turn is None else timeline.slice(turn.start, timeline.received)
            llm = self.engines.llm if self.settings.end_of_turn_llm else None
            agent_words = self.conversation.agent_last_words()
            messages = self.conversation.messages_for(text)
            turn.gather(PauseSignals(text, agent_words, llm, messages, smart_turn, audio, answering=prepare))
        if not prepare:
            return
        metrics = TurnMetrics(turn.id, stt_final_ms=stt_ms)
        messages = self.conversation.messages_for(text)
        turn.prepare(self.replies.new(turn.id, text, self.engines.llm, messages, metrics, held=True), metrics)

    async def play(self, answer: Answer, reply: Reply, running: asyncio.Task) -> None:
        """Make ``reply`` the one the user hears, and wait for it to end (cancelled, ``running`` is too)."""
        self.floor.transition(Play(answer, reply))
        number = answer.number
        assert number is not None  # it plays
        self.control.items.playing(number, reply)
        if self.agent is not None:
            self.agent.release(reply.turn)
        failed = False
        try:
            await running
        except asyncio.CancelledError:
            raise
        except Exception:  # a stage failed: tell the client, keep the session
            log_exception(log, "session %s: reply failed", self.id)
            self.emit(Error("reply_failed", REPLY_FAILED))
            failed = True
        if self.floor.answer is answer:  # else it was cancelled, and said so
            self.interruptions.answer_finished(reply, self.clock())
            self.emit(Transcript("agent", reply.text, final=True))
            calls = [] if failed else reply.tool_calls  # the client's functions to run, now that it was said
            for call in calls:
                self.emit(FunctionCall(number, call.id, call.name, call.arguments))
            # A failed turn stays out of the history: its words would fail the next answers too.
            self._remember(reply, reply.text, failed=failed, calls=calls)
            self.floor.transition(Finish(answer, failed))
            # Apologize for a failed answer to the user; never for fixed words, so no loop.
            if failed and reply.user_text:
                self.say(APOLOGY)

    def _remember(
        self, reply: Reply, heard: str, interrupted: bool = False, failed: bool = False, calls: Sequence[ToolCall] = ()
    ) -> None:
        tool_messages: list[Message] = []
        if self.agent is not None:
            # A failed answer was not heard whole either: its side effects stay done for a repeated request.
            tool_messages = self.agent.answer_ended(reply.turn, heard, interrupted or failed)
            if interrupted and not reply.started_audio and not tool_messages:
                return  # nothing was said or done
        if failed:
            return
        results = self.control.calls.hand_off(calls)
        message = self.conversation.remember(reply.user_text, heard, tool_messages, calls, results)
        self.control.items.remembered(reply, message)

    async def close(self) -> None:
        """Stop everything this session started."""
        self.closed = True
        self.idle.stop()
        self.control.close()
        if (answer := self.floor.answer) is not None:
            self.floor.transition(Close())
            if answer.task is not None:
                await asyncio.gather(answer.task, return_exceptions=True)
        await self.listener.close()
        await self.interruptions.close()
        self.stt.close()
        await self.conversation.close()
        if self.agent is not None:
            await self.agent.close()
