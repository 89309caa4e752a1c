"""Is speech heard over the agent its own voice coming back? The echo half of the barge-in checks.

The agent's output is kept (:class:`~voice_agent.echo_reference.EchoReference`), its echo path looked for in
the input and turned down before the VAD and Whisper judge what is left; words that match what the agent
was saying around then are its own voice. :class:`~.interruptions.Interruptions` builds on this.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import log as logs
from ..audio import PIPELINE_RATE
from ..config import Settings
from ..echo import ECHO_SHARE, WHOLE_ECHO_SHARE, others_words, timed_words, words_of
from ..echo_reference import INPUT_SAMPLES as ECHO_INPUT_SAMPLES
from ..echo_reference import QUIET_INPUT_SAMPLES, EchoReference
from ..echo_suppression import FIT_S, suppress_echo
from ..engines.interfaces import VADBackend
from ..engines.stt_queue import SessionSTT
from ..engines.vad import WINDOW, WINDOW_MS
from ..protocols.events import AgentAudio, Clear, OutputEvent, TurnIgnored
from ..reply.pipeline import Reply
from .barge_in import BargeInPolicy
from .listener import Listener
from .turn import has_words
from .user_turn import SPEECH_TAIL_SAMPLES, UserTurn

log = logging.getLogger(__name__)

# A turn that begins this soon after an answer ended may be that answer's echo
# coming back (the echo path, and the pre-roll kept before speech).
ECHO_TAIL_S = 1.0
# Speech windows (32 ms) the barge-in check's audio must still hold once the agent's echo is taken out:
# a noise over the echo is speech to the VAD because of the echo under it.
MIN_SPEECH_WINDOWS = 3
# A speech window once the echo is out must have kept this share of the input's amplitude: Silero hears speech
# in what is left of the echo (in 3 of 4 stretches of 480 ms of a Piper answer's echo through the rig's rooms,
# three windows or more), which keeps 3 % (the suppressor's floor) to 26 % (p95) of it; a user's voice over the
# echo keeps 75 to 96 % (medians of the barge-in eval's turns). Offline, 2 to 3 % of those stretches kept three
# such windows, and 88 % of the user's windows were kept (docs/results/bargein.md).
MIN_KEPT_SHARE = 0.15


def kept_shares(heard: np.ndarray, cleaned: np.ndarray) -> np.ndarray:
    """For each whole VAD window, the share of ``heard``'s amplitude that ``cleaned`` (it, the echo turned down)
    kept."""
    windows = min(len(heard), len(cleaned)) // WINDOW
    before = heard[: windows * WINDOW].astype(np.float64).reshape(windows, WINDOW)
    after = cleaned[: windows * WINDOW].astype(np.float64).reshape(windows, WINDOW)
    return np.sqrt(np.sum(after**2, axis=1) / np.maximum(np.sum(before**2, axis=1), 1e-20))


def speech_left(heard: np.ndarray, cleaned: np.ndarray, probabilities: np.ndarray, threshold: float) -> np.ndarray:
    """Which VAD windows of ``cleaned`` (``heard`` with the echo turned down; Silero's ``probabilities`` of it)
    are speech: not what is left of the echo."""
    count = min(len(probabilities), len(cleaned) // WINDOW)
    kept = kept_shares(heard, cleaned)[:count] >= MIN_KEPT_SHARE
    return without_lone_windows((np.asarray(probabilities[:count]) >= threshold) & kept)


def _next_to_speech(speech: np.ndarray) -> np.ndarray:
    """The windows with a ``speech`` window just before or after them."""
    return np.concatenate([speech[1:], [False]]) | np.concatenate([[False], speech[:-1]])


def without_lone_windows(speech: np.ndarray) -> np.ndarray:
    """``speech`` less its windows with no speech either side: what is left of a loud echo once it is taken
    out makes one now and then (a few a second), and a word lasts longer than one window."""
    return speech & _next_to_speech(speech)


def speech_only(audio: np.ndarray, speech: np.ndarray) -> np.ndarray | None:
    """``audio`` silenced but for its ``speech`` windows (and one window either side), or None if it holds fewer
    than :data:`MIN_SPEECH_WINDOWS`: what is left of the echo between the words, Whisper reads as words."""
    if speech.sum() < MIN_SPEECH_WINDOWS:
        return None
    kept = speech | _next_to_speech(speech)
    mask = np.repeat(kept, WINDOW)[: len(audio)]
    gated = audio.copy()
    gated[: len(mask)] *= mask
    return gated


def timed_chunks(reply: Reply) -> list[tuple[str, float, float]]:
    """Each chunk of ``reply`` the user may have heard: its text, and its start and end in the answer's audio."""
    return [(c.text, c.start_s, c.end_s if c.end_s is not None else c.start_s + c.synthesized_s) for c in reply.chunks]


@dataclass(frozen=True)
class SessionParts:
    """The parts of its session that hearing speech over the agent reads, and where it tells the client."""

    listener: Callable[[], Listener]
    stt: SessionSTT
    vad: VADBackend
    policy: BargeInPolicy
    settings: Callable[[], Settings]  # the session's, as its client changed them
    sample_rate: Callable[[], int]  # the client's
    emit: Callable[[OutputEvent], None]
    clock: Callable[[], float]
    session_id: str = ""


class OwnVoice:
    def __init__(self, parts: SessionParts):
        self._listener, self._stt, self._vad, self.policy = parts.listener, parts.stt, parts.vad, parts.policy
        self._settings, self._sample_rate = parts.settings, parts.sample_rate
        self._emit, self._clock, self._id = parts.emit, parts.clock, parts.session_id
        self.echo_heard = False  # the agent's own voice came back in this session
        self._finished: tuple[Reply, float] | None = None  # the last answer played to its end, and when
        self._output = EchoReference(self._clock())  # what the client plays: its echo is not the user
        self._quiet_judged = (-1, False)  # a start of speech, and whether the input was near silence before it
        # The input was near silence all through a stretch of the agent's output: its voice does not come back
        # in this call (a headset, the client's echo cancelling), unless its words are heard (echo_heard).
        self._echo_free = False
        self._quiet_looked = 0  # the input received when the agent's talk was last looked at for that

    def see(self, event: OutputEvent) -> None:
        """Note the agent's audio and the client's buffer clears, for :meth:`hears_own_voice`."""
        if isinstance(event, AgentAudio):
            self._output.played(event.samples, self._sample_rate(), self._clock())
            self._look_for_quiet_input()
        elif isinstance(event, Clear):
            self._output.cleared(self._clock())

    @property
    def echo_comes_back(self) -> bool:
        """Whether the agent's own voice comes back in this session: its words were heard, or its output's echo
        path is found in the input."""
        return self.echo_heard or self._output.path_confirmed()

    def hears_own_voice(self, start: int, end: int) -> bool:
        """Whether the input up to sample ``end`` is the agent's own output coming back; the speech that it
        would be part of began at sample ``start``."""
        if not self._settings().barge_in_ignore_echo:
            return False
        if self._began_over_quiet(start) or self._no_echo_before(end - WINDOW):
            return False
        timeline = self._listener().timeline
        heard = timeline.slice(end - ECHO_INPUT_SAMPLES, end)
        return self._output.explains(heard, timeline.arrival_time(end))

    def answer_finished(self, reply: Reply, at: float) -> None:
        self._finished = (reply, at)

    def may_hold_echo(self, turn: UserTurn) -> bool:
        """Whether the agent's echo may be in ``turn``'s speech: the input before it was not near silence under
        the agent's output."""
        return bool(self._settings().barge_in_ignore_echo) and not self._began_over_quiet(turn.start)

    def _began_over_quiet(self, start: int) -> bool:
        """Whether the speech from sample ``start`` began over input near silence while the agent's output
        played: none of that output comes back, so nothing in that speech is its echo, however well it
        correlates with the output. A voice correlates with it at one lag or another by chance: at 0.91, a
        path found 270 ms into "Stop, please wait a moment." took its "Stop" for echo, out of its words.

        Judged once for each start, while the output before it is still kept."""
        if start != self._quiet_judged[0]:
            self._quiet_judged = (start, self._no_echo_before(start))
        return self._quiet_judged[1]

    def _no_echo_before(self, start: int) -> bool:
        """Whether the input before sample ``start`` was near silence while the agent's output played: none of
        it comes back, and an echo path found before was found by chance, in a user's voice (forgotten).

        Once that held all through a stretch of output, it holds for the call: no speech in it is the agent's
        echo. Judged afresh for each speech, a user who goes on just as an answer begins could not be told from
        its echo (too little of it played to tell), and one onset correlates with another at some lag: with
        no echo at all, the echo test took words said 300 to 600 ms into an answer for it (offline, the
        eval's recorded speech over an answer of Piper's)."""
        if not self._settings().barge_in_ignore_echo:
            return True  # its echo is the user's speech then, as any speech is
        if not self._echo_free or self.echo_heard:
            timeline = self._listener().timeline
            heard = timeline.slice(max(timeline.start, start - QUIET_INPUT_SAMPLES), start)
            heard_end_at = timeline.arrival_time(start)
            if not self._output.silent_under(heard, heard_end_at):
                return False
            if self._output.played_through(len(heard), heard_end_at):
                self._echo_free = True
        self._output.forget_path()
        return True

    def _look_for_quiet_input(self) -> None:
        """While the agent talks, every half of the input that :meth:`_no_echo_before` looks at: is it near
        silence under the output? Then the call is known free of its echo before the user speaks over it."""
        if self._echo_free or self.echo_heard:
            return
        received = self._listener().timeline.received
        if received - self._quiet_looked >= QUIET_INPUT_SAMPLES // 2:
            self._quiet_looked = received
            self._no_echo_before(received)

    def _echo_over(self, turn: UserTurn, tail: int = 0) -> tuple[np.ndarray, np.ndarray, int, int] | None:
        """For the barge-in check of ``turn`` (and ``tail`` samples past its last speech): :meth:`_echo_between`
        its start and its end; None when no echo of the agent can be in it."""
        if not self.may_hold_echo(turn):
            return None
        return self._echo_between(turn.start, turn.last_speech + tail)

    def _echo_between(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray, int, int] | None:
        """For a look at the input from sample ``start`` to ``end``: the input from :data:`FIT_S` before it, the
        output that played over that input, the echo path's lag, and the look's length; None when no echo path
        is found in it."""
        timeline = self._listener().timeline
        start = max(start, timeline.start)
        heard = timeline.slice(max(timeline.start, start - int(FIT_S * PIPELINE_RATE)), end)
        length = end - start
        path = self._output.echo_path(heard, timeline.arrival_time(end), len(heard) - length)
        if path is None:
            return None
        return heard, path[0], path[1], length

    def _speech_without_echo(
        self, heard: np.ndarray, played: np.ndarray, lag: int, length: int
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """The turn's last ``length`` samples of ``heard`` with the echo of ``played`` turned down and only its
        speech kept (None when it holds no speech: a noise over the echo), and which VAD windows are speech."""
        cleaned = suppress_echo(heard, played, lag)[-length:]
        probabilities = np.array(self._vad.stream().process(cleaned), dtype=np.float64)
        speech = speech_left(heard[-length:], cleaned, probabilities, self._settings().vad_threshold)
        return speech_only(cleaned, speech), speech

    def not_for_agent(self, turn: UserTurn, text: str) -> bool:
        """Whether committed ``turn`` is none of the agent's business: no words, a backchannel over it, its own voice."""
        if not has_words(text) or (turn.over_agent and self.policy.is_backchannel(self._without_echo_tail(turn, text))):
            log.log(logs.words_level(), "session %s: turn %d had no words for the agent: %r", self._id, turn.id, text)
            self._emit(TurnIgnored(turn.id))
            return True
        if self.echoes_last_answer(turn, text):
            log.log(logs.words_level(), "session %s: turn %d was the agent's own voice: %r", self._id, turn.id, text)
            self.echo_heard = True
            return True
        return False

    def echoes_last_answer(self, turn: UserTurn, text: str) -> bool:
        """A "turn" that began as the last answer's final words came back (a speakerphone's echo tail)."""
        if not self._settings().barge_in_ignore_echo or self._finished is None:
            return False
        if self._echo_free and not self.echo_heard:
            return False  # "Four." said as an answer ended was taken for its "... your order." (endpointing eval)
        reply, ended_at = self._finished
        began_at = self._listener().timeline.arrival_time(turn.start)
        if began_at > ended_at + ECHO_TAIL_S:
            return False
        spoken_s = (turn.last_speech - turn.start) / PIPELINE_RATE
        return self.policy.is_own_voice(text, timed_chunks(reply), reply.heard_s(), spoken_s, WHOLE_ECHO_SHARE)

    def _without_echo_tail(self, turn: UserTurn, text: str) -> str:
        """``text`` without the last answer's final words: a "yeah" over the agent runs on into their echo
        ("Yeah, I'm not." over "... I'm not sure"), and then the turn is only the "yeah"."""
        if not self._settings().barge_in_ignore_echo or self._finished is None:
            return text
        reply, _ = self._finished
        playing_s = reply.heard_s()
        spoken_s = (turn.last_speech - turn.start) / PIPELINE_RATE
        return others_words(text, timed_words(timed_chunks(reply)), playing_s - spoken_s, playing_s)

    def _is_own_voice(self, turn: UserTurn, text: str, reply: Reply, echo_out: bool) -> bool:
        """Whether ``text`` heard over ``reply`` is its own voice. Once the echo is out (``echo_out``), what
        is left of it (a loud word's residue, the path's lag found wrong) must be two words or more unless its
        one word stops no one, and all the agent's if a word stops a speaker: a user's "No." or "Sorry" is a
        word the agent also says. Left paused for such a word until the turn ended, the agent stopped for
        600 ms for its own "you" (scripts/bargein_eval's echo rig); a user who goes on pauses it again at
        once. Words that stop no one need the share of any echo: a door slam over "You can take the" left
        "Take the plane." once the echo was out, and cleared the answer."""
        if echo_out and len(words_of(text)) < 2 and not self.policy.is_lone_word(text):
            return False
        spoken_s = (turn.last_speech - turn.start) / PIPELINE_RATE
        share = WHOLE_ECHO_SHARE if echo_out and self.policy.has_stop_word(text) else ECHO_SHARE
        return self.policy.is_own_voice(text, timed_chunks(reply), reply.heard_s(), spoken_s, share)

    async def _words(
        self,
        turn: UserTurn,
        echo: tuple[np.ndarray, np.ndarray, int, int] | None,
        tail: int = 0,
        judge_noise: bool = True,
    ) -> str:
        """``turn``'s words (and ``tail`` samples past its last speech) with ``echo`` (:meth:`_echo_over`) out of
        its audio: none where no speech is left, or (``judge_noise``) where Whisper judges what is left no speech
        and it holds no stop word."""
        audio = turn.audio(tail)
        spoken_ms = turn.speech_ms
        if echo is not None:
            cleaned, speech = await asyncio.to_thread(self._speech_without_echo, *echo)
            if cleaned is None:
                return ""
            audio, spoken_ms = cleaned, float(speech.sum()) * WINDOW_MS
        reading = await self._stt.read(audio)
        noise = judge_noise and self.policy.is_noise(reading.text, reading.no_speech, spoken_ms)
        return "" if noise else reading.text

    async def words_without_echo(self, turn: UserTurn, text: str) -> str:
        """The words of committed ``turn`` with the agent's echo out of its audio, for a turn that began over
        the agent; ``text``, its transcript, when no echo can be in it.

        Such a turn's transcript holds the echo's words, garbled past matching them; answered, the agent would
        talk to itself. A turn that interrupted the agent was judged words already: Whisper's doubt about the
        whole of it does not undo that.
        """
        if not turn.began_over_agent or (echo := self._echo_over(turn, SPEECH_TAIL_SAMPLES)) is None:
            return text
        try:
            return await self._words(turn, echo, SPEECH_TAIL_SAMPLES, judge_noise=turn.over_agent)
        except Exception:
            logs.log_exception(log, "session %s: transcribing without the echo failed", self._id)
            return text
