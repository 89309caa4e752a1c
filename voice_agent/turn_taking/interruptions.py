"""User speech while the agent has the floor: barge-in checks, and the agent's own voice coming back.

The rule of when to pause, check or stop is :class:`~.barge_in.BargeInPolicy`;
this runs its transcriptions and acts on them through the session: it pauses
and resumes the reply the user hears, and hands the floor to the user. An
answer the user interrupts within the grace after it began is withdrawn
instead (:mod:`.turn_merge`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import numpy as np

from .. import log as logs
from ..audio import PIPELINE_RATE
from ..config import Settings
from ..echo import ECHO_SHARE, WHOLE_ECHO_SHARE, others_words, timed_words, words_of
from ..echo_reference import INPUT_SAMPLES as ECHO_INPUT_SAMPLES
from ..echo_reference import QUIET_INPUT_SAMPLES, EchoReference
from ..echo_suppression import FIT_S, suppress_echo
from ..engines.interfaces import Reading
from ..engines.loader import Engines
from ..engines.stt_queue import SessionSTT
from ..engines.vad import WINDOW, WINDOW_MS
from ..protocols.events import TURN_DETECTED, AgentAudio, Clear, OutputEvent, TurnDetection, TurnIgnored
from ..reply.pipeline import Reply
from .answer import USER_HOLDS, Answer, Hold
from .barge_in import BargeIn, BargeInPolicy, Hearing, Judgement, Verdict, judge
from .floor import Floor, FloorEvent, HandOver, Pause, Resume
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
# Speech at the onset that fades holds the agent's pause this long for more: over the echo a user's first
# syllables come as lone speech windows about 60 ms apart (the echo test takes those between for echo), and
# resumed at each fade, the agent talked on until they made a turn: "Hold on" stopped it in 460 and 719 ms
# (scripts/bargein_eval's echo rig). Well within the output lead, so the pause of a lone window ends before
# the client's buffer runs dry.
ONSET_HOLD_S = 2 * WINDOW_MS / 1000
# Lone speech windows that close together keep the agent silent this long at most, without making a turn.
ONSET_CHAIN_MAX_S = 1.0
# Speech over the agent that starts (its pre-roll included) this soon after an ignored turn ended goes on from it.
GOES_ON_S = 0.3


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


def _speech_end(turn: UserTurn, speech: np.ndarray) -> int:
    """The sample just past the last of ``speech``'s windows, counted from ``turn``'s start; 0 for none."""
    return turn.start + (int(np.flatnonzero(speech)[-1]) + 1) * WINDOW if speech.any() else 0


def timed_chunks(reply: Reply) -> list[tuple[str, float, float]]:
    """Each chunk of ``reply`` the user may have heard: its text, and its start and end in the answer's audio."""
    return [(c.text, c.start_s, c.end_s if c.end_s is not None else c.start_s + c.synthesized_s) for c in reply.chunks]


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
    settings: Settings
    engines: Engines
    clock: Callable[[], float]
    stt: SessionSTT
    listener: Listener
    emit: Callable[[OutputEvent], None]

    @property
    def control(self) -> TurnDetectionInEffect: ...

    @property
    def merge(self) -> Withdrawal: ...

    floor: Floor

    @property
    def sample_rate(self) -> int: ...

    def announce(self, turn: UserTurn) -> None: ...

    def interrupt(self, reason: str = TURN_DETECTED) -> None: ...

    def commit(self, turn: UserTurn) -> None: ...


class Interruptions:
    def __init__(self, session: OverlapFloor, policy: BargeInPolicy):
        self._session = session
        self.policy = policy
        self.echo_heard = False  # the agent's own voice came back in this session
        self._finished: tuple[Reply, float] | None = None  # the last answer played to its end, and when
        self._output = EchoReference(session.clock())  # what the client plays: its echo is not the user
        self._look: asyncio.Task | None = None  # is speech left once the echo is out? (the pause waits for it)
        self._hold_look: asyncio.Task | None = None  # the same, for speech held at the onset (_look_at_hold)
        self._read: dict[UserTurn, asyncio.Task] = {}  # turns that ended, and the reading that decides them
        self._judged: dict[int, int] = {}  # turn id: the input up to which its speech was judged no interruption
        self._quiet_judged = (-1, False)  # a start of speech, and whether the input was near silence before it
        # The input was near silence all through a stretch of the agent's output: its voice does not come back
        # in this call (a headset, the client's echo cancelling), unless its words are heard (echo_heard).
        self._echo_free = False
        self._quiet_looked = 0  # the input received when the agent's talk was last looked at for that
        self._onset_timer: asyncio.TimerHandle | None = None  # ends that pause with the output lead; None once run
        self._fade_timer: asyncio.TimerHandle | None = None  # ends it ONSET_HOLD_S after its speech faded
        self._onset_began = 0.0  # when that pause began, on the session's clock
        self._onset_start = 0  # the sample its speech began at
        self._short_timer: asyncio.TimerHandle | None = None  # ends a pause for speech that stops short of a check
        self._onset_spent = False  # this run of speech paused the agent once already
        self._onset_over_echo = False  # that pause may be for the agent's echo: the echo test ends it
        self._word_held: int | None = None  # the turn whose one word keeps the agent paused (is_lone_word)
        self._stop_read: int | None = None  # the turn over the echo that a reading found a stop word in
        self._ignored: tuple[int, int] | None = None  # the last turn over the agent ignored: its start, last speech

    def _post(self, event: FloorEvent) -> None:
        self._session.floor.transition(event)

    def watching_output(self, send: Callable[[OutputEvent], None]) -> Callable[[OutputEvent], None]:
        """``send``, with the agent's audio and the client's buffer clears noted first, for :meth:`hears_own_voice`."""

        def send_watched(event: OutputEvent) -> None:
            if isinstance(event, AgentAudio):
                self._output.played(event.samples, self._session.sample_rate, self._session.clock())
                self._look_for_quiet_input()
            elif isinstance(event, Clear):
                self._output.cleared(self._session.clock())
            send(event)

        return send_watched

    @property
    def echo_comes_back(self) -> bool:
        """Whether the agent's own voice comes back in this session: its words were heard, or its output's echo
        path is found in the input."""
        return self.echo_heard or self._output.path_confirmed()

    def ignored(self, turn: UserTurn) -> None:
        """``turn``, over the agent, ended short of interrupting it."""
        self._ignored = (turn.start, turn.last_speech)

    def reach_back(self, start: int) -> int:
        """Where a turn over the agent whose speech's pre-roll reaches back to sample ``start`` begins: at the
        turn before it, if that one was ignored and ended at most :data:`GOES_ON_S` before. "Stop, please wait
        a moment." said over the agent paused at the comma past the end of a turn, and its "Stop," (224 ms of
        speech, short of a check) was ignored: the interruption's words lost it."""
        ignored, self._ignored = self._ignored, None
        if ignored is None or start - ignored[1] > GOES_ON_S * PIPELINE_RATE:
            return start
        return max(self._session.listener.timeline.start, min(start, ignored[0]))

    def hears_own_voice(self, start: int, end: int) -> bool:
        """Whether the input up to sample ``end`` is the agent's own output coming back; the speech that it
        would be part of began at sample ``start``."""
        if not self._session.settings.barge_in_ignore_echo:
            return False
        if self._began_over_quiet(start) or self._no_echo_before(end - WINDOW):
            return False
        timeline = self._session.listener.timeline
        heard = timeline.slice(end - ECHO_INPUT_SAMPLES, end)
        return self._output.explains(heard, timeline.arrival_time(end))

    async def close(self) -> None:
        for timer in (self._onset_timer, self._fade_timer, self._short_timer):
            if timer is not None:
                timer.cancel()
        tasks = list(self._read.values())
        tasks += [look for look in (self._look, self._hold_look) if look is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def answer_finished(self, reply: Reply, at: float) -> None:
        self._finished = (reply, at)

    def speech_begins(self, start: int) -> None:
        """A speech window over the agent, its run from sample ``start``, too short yet for a turn: the agent
        falls silent at once.

        The pause its turn would bring at ``barge_in_min_speech_ms`` comes that much sooner, and so does the
        stop of an interruption. Speech that fades before it makes a turn (a click, a breath) resumes the
        answer within the client's output lead, unless more speech comes first: the user hears no gap. Not
        where the turn would not pause the agent at once (a longer ``barge_in_min_speech_ms``). Where the
        agent's echo may be in the speech (the input before it was not near silence while the agent talked),
        the pause also ends with the output lead, unless its turn's echo test finds speech left once the echo
        is out before then.
        """
        session = self._session
        answer = session.floor.answer
        if self._fade_timer is not None and answer is not None and answer.held_by(Hold.ONSET):
            # More speech before the faded one's pause ended: the agent stays silent for it.
            self._fade_timer.cancel()
            self._fade_timer = None
            self._onset_spent = True
            if session.clock() - self._onset_began < ONSET_CHAIN_MAX_S:
                log.debug("session %s: more speech at the onset within the hold: the agent stays paused", session.id)
                self._time_onset(answer)
                if self._onset_over_echo:
                    self._look_at_hold(answer)
            else:
                self._onset_ends(answer, "lone speech windows for a second, and no turn")
            return
        if (
            self._onset_spent
            or answer is None
            or answer.heard_nothing
            or answer.paused
            or not session.control.turn_detection.interrupt_response
            or self.policy.min_speech_ms > session.settings.vad_min_speech_ms
        ):
            return
        self._post(Pause(answer, Hold.ONSET, "speech began over it"))
        self._onset_spent = True
        self._onset_began = session.clock()
        self._onset_start = start
        self._onset_over_echo = self.echo_heard or not self._no_echo_before(start)
        self._time_onset(answer)

    def _time_onset(self, answer: Answer) -> None:
        """A run that hovers about the VAD's threshold makes no turn and never fades: past the output lead, the
        user would hear the gap, for what may be nothing. An earlier onset's timer must not end this pause: it
        resumed the agent 20 ms into the pause for "No, that's not what I asked." (the echo rig)."""
        if self._onset_timer is not None:
            self._onset_timer.cancel()
        self._onset_timer = asyncio.get_running_loop().call_later(
            self._session.settings.output_lead_ms / 1000, self._onset_runs_out, answer
        )

    def _onset_runs_out(self, answer: Answer) -> None:
        self._onset_timer = None
        if answer.held_by(Hold.ONSET) and self._look is not None and not self._look.done():
            # The look at its turn's speech with the echo out is under way, and ends the pause (or keeps it for
            # speech) in a few ms: resumed now, the agent talked for 50 ms before that look paused it again
            # (scripts/bargein_eval's echo rig, "Sorry, can you repeat that?").
            return
        self._onset_ends(answer, "the pause at the onset ran out")

    def may_hold_echo(self, turn: UserTurn) -> bool:
        """Whether the agent's echo may be in ``turn``'s speech: the input before it was not near silence under
        the agent's output."""
        return bool(self._session.settings.barge_in_ignore_echo) and not self._began_over_quiet(turn.start)

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
        if not self._session.settings.barge_in_ignore_echo:
            return True  # its echo is the user's speech then, as any speech is
        if not self._echo_free or self.echo_heard:
            timeline = self._session.listener.timeline
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
        received = self._session.listener.timeline.received
        if received - self._quiet_looked >= QUIET_INPUT_SAMPLES // 2:
            self._quiet_looked = received
            self._no_echo_before(received)

    def speech_faded(self) -> None:
        """The speech that paused the agent at its onset made no turn: the agent goes on, unless more speech
        comes within :data:`ONSET_HOLD_S`."""
        self._onset_spent = False
        answer = self._session.floor.answer
        if answer is None or not answer.held_by(Hold.ONSET):
            return
        if self._fade_timer is not None:
            self._fade_timer.cancel()
        self._fade_timer = asyncio.get_running_loop().call_later(ONSET_HOLD_S, self._faded_out, answer)

    def _look_at_hold(self, answer: Answer) -> None:
        """The onset's pause held over a fade is for the agent's own echo if no speech window at all is left of
        the input since the onset once the echo is out: the agent goes on at once. Echo windows about 60 ms
        apart, each too short for the echo test, held an answer silent for 240 to 380 ms (scripts/bargein_eval's
        echo rig, seeds 0 and 7). Not the three windows a check's words need: a user's first syllables, held
        here, may hold fewer."""
        if self._hold_look is not None and not self._hold_look.done():
            return
        echo = self._echo_between(self._onset_start, self._session.listener.timeline.received)
        if echo is not None:
            self._hold_look = asyncio.create_task(self._end_hold_if_echo(answer, echo))

    async def _end_hold_if_echo(self, answer: Answer, echo: tuple[np.ndarray, np.ndarray, int, int]) -> None:
        session = self._session
        try:
            _, speech = await asyncio.to_thread(self._speech_without_echo, *echo)
        except Exception:
            logs.log_exception(log, "session %s: taking the echo out of the onset failed", session.id)
            return
        if not speech.any() and session.listener.turn is None:  # a turn's own look decides on more of it
            self._onset_ends(answer, "the speech held at the onset is the agent's echo")

    def _faded_out(self, answer: Answer) -> None:
        self._fade_timer = None
        self._onset_ends(answer, "the speech at the onset made no turn")

    def _onset_ends(self, answer: Answer | None, why: str) -> None:
        if answer is None or not answer.held_by(Hold.ONSET):
            return  # resumed already, or its turn took the pause over
        if self._fade_timer is not None:
            self._fade_timer.cancel()
            self._fade_timer = None
        self._post(Resume(answer, Hold.ONSET, why))

    def user_speaks(self, turn: UserTurn) -> None:
        """Another speech window of ``turn`` over the agent: interrupt it for real speech, not for "mm-hm"."""
        self._onset_spent = False
        session = self._session
        answer = session.floor.answer
        if not self._onset_over_echo and answer is not None:
            self._post(HandOver(answer, Hold.ONSET, Hold.TURN))  # the turn's own pause and check take it from here
        if answer is None or answer.reply is None or not session.control.turn_detection.interrupt_response:
            return
        if session.merge.take_grace(answer):
            turn.may_withdraw = True
        if answer.paused:  # at its onset, or for this turn's speech before
            self._end_pause_if_speech_stops(answer, turn)
        if turn.speech_ms < self.policy.min_speech_ms:
            return
        checking = turn.barge_check is not None and not turn.barge_check.done()
        echo = self._echo_over(turn)
        # Once the echo can be taken out of what is heard, its own voice leaves no speech to pause for: the
        # agent falls silent for what is left at once, as in a session whose voice never came back. Without
        # that, once its voice came back, the words decide before it falls silent (LISTEN).
        echo_heard = self.echo_heard and echo is None and not turn.may_withdraw
        if echo is None:
            self._onset_ends(answer, "no echo to take out: the turn decides, as without one")
        action = self.policy.decide(turn.speech_ms, turn.barge_checked_ms, checking, echo_heard)
        if action is BargeIn.NONE:
            return
        if action is not BargeIn.LISTEN:
            if echo is not None:
                # The agent's echo is in what the VAD took for speech: act once it is out, if speech is left.
                if self._look is None or self._look.done():
                    self._look = asyncio.create_task(self._act_on_speech(answer, turn, echo, action))
            elif action is BargeIn.INTERRUPT:
                self._yield_to(turn, "")
            else:
                self._post(
                    Pause(
                        answer,
                        Hold.TURN,
                        "speech over it: silent at once, as a person would, while its words are checked",
                    )
                )
                if action is BargeIn.PAUSE:
                    self._end_pause_if_speech_stops(answer, turn)
        if action in (BargeIn.CHECK, BargeIn.LISTEN):
            turn.barge_checked_ms = turn.speech_ms
            turn.barge_check = asyncio.create_task(self._check(turn, turn.audio(), echo))

    async def _act_on_speech(
        self, answer: Answer, turn: UserTurn, echo: tuple[np.ndarray, np.ndarray, int, int], action: BargeIn
    ) -> None:
        """Pause ``answer`` (or stop it, for ``action`` INTERRUPT) if ``echo``'s input holds speech once the echo
        is out: a few ms, against the quarter second of the check's transcription."""
        session = self._session
        try:
            cleaned, speech = await asyncio.to_thread(self._speech_without_echo, *echo)
        except Exception:
            logs.log_exception(log, "session %s: taking the echo out failed", session.id)
            cleaned, speech = echo[0], np.ones(len(echo[0]) // WINDOW, bool)  # unknown: treat as speech
        if session.floor.answer is not answer or session.listener.turn is not turn:
            self._onset_ends(answer, "the answer or the turn ended while the echo was taken out")
            return  # the answer, or the turn, ended meanwhile: the resume is behind us
        if cleaned is None:
            # No speech yet; a pause at the onset ends with the output lead (speech_begins), unless a window
            # with speech comes first: the user's first 100 ms over a loud echo can leave none once it is out
            # (resumed at once, the agent talked for 50 ms before the next window paused it again, in three of
            # five interruptions of an echo-rig run).
            if self._onset_timer is None:  # the onset's pause ran out while this look went on
                self._onset_ends(answer, "the pause at the onset ran out, and no speech once the echo is out")
            return
        if self._speech_since_judged(turn, speech) < MIN_SPEECH_WINDOWS:
            self._onset_ends(answer, "no new speech since the turn was judged no interruption")
            return  # the turn so far was judged no interruption, and no speech came since: the agent goes on
        self._post(HandOver(answer, Hold.ONSET, Hold.TURN))  # speech: held for it now, not till the onset's timer
        # Whatever the words, but only for that much speech once the echo is out (a hiss over it lasts long).
        if action is BargeIn.INTERRUPT and speech.sum() * WINDOW_MS >= self.policy.force_ms:
            self._yield_to(turn, "")
        else:
            self._post(Pause(answer, Hold.TURN, "speech left with the echo out"))
            if action is BargeIn.PAUSE:
                self._end_pause_if_speech_stops(answer, turn)

    def _end_pause_if_speech_stops(self, answer: Answer, turn: UserTurn) -> None:
        """Resume ``answer``, paused for ``turn`` before any check of its words, if no speech window comes within
        the output lead the client still plays: the user hears no gap.

        Speech that stops short of ``barge_in_check_ms`` interrupts no one, and its turn is ignored when it
        ends; held paused until then, the agent fell silent for 370 ms for a blip of its own echo once it was
        taken out, and for 400 ms for a 96 ms turn that took its onset's pause over (scripts/bargein_eval's
        echo rig). A user who goes on pauses it again at their next speech window. The silence is counted in
        the input that came, not on the clock: input that stops coming (a network stall) is no silence.
        """
        if turn.barge_check is not None or turn.may_withdraw:
            return  # its check decides; or the graceful way out (turn_merge) does
        self._look_for_silence_in(self._session.settings.output_lead_ms / 1000, answer, turn, turn.last_speech)

    def _look_for_silence_in(self, seconds: float, answer: Answer, turn: UserTurn, last_speech: int) -> None:
        if self._short_timer is not None:
            self._short_timer.cancel()
        self._short_timer = asyncio.get_running_loop().call_later(
            seconds, self._speech_stopped_short, answer, turn, last_speech
        )

    def _speech_stopped_short(self, answer: Answer, turn: UserTurn, last_speech: int) -> None:
        session = self._session
        if not (
            session.floor.answer is answer
            and session.listener.turn is turn
            and turn.last_speech == last_speech
            and turn.barge_check is None
            and (self._look is None or self._look.done())
            and not answer.held_by(Hold.ONSET)  # its own timer ends that pause
        ):
            return
        short_s = (
            session.settings.output_lead_ms / 1000 - (session.listener.timeline.received - last_speech) / PIPELINE_RATE
        )
        if short_s > 0:
            self._look_for_silence_in(max(short_s, WINDOW_MS / 1000), answer, turn, last_speech)
        else:
            self._post(Resume(answer, Hold.TURN, "the speech over it stopped short of a check"))

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
        timeline = self._session.listener.timeline
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
        probabilities = np.array(self._session.engines.vad.stream().process(cleaned), dtype=np.float64)
        speech = speech_left(heard[-length:], cleaned, probabilities, self._session.settings.vad_threshold)
        return speech_only(cleaned, speech), speech

    def _speech_since_judged(self, turn: UserTurn, speech: np.ndarray) -> int:
        """How many of ``turn``'s ``speech`` windows (from its start, the echo out) came after the input judged
        no interruption for it: a window or two there is what is left of a loud echo, as before the judgement."""
        judged = self._judged.get(turn.id)
        if judged is None:
            return int(speech.sum())
        return int(speech[max(0, (judged - turn.start) // WINDOW) :].sum())

    def holds_word(self, turn: UserTurn) -> bool:
        """Whether ``turn``'s one word keeps the agent paused, waiting for more speech."""
        return self._word_held == turn.id

    def reading(self, turn: UserTurn, task: asyncio.Task) -> None:
        """``turn`` ended, and ``task`` reads its words: if they interrupt, its answer reads its audio again."""
        self._read[turn] = task

        def read(_: asyncio.Task) -> None:
            if self._read.get(turn) is task:
                del self._read[turn]

        task.add_done_callback(read)

    def turns_read(self) -> list[UserTurn]:
        """The turns that ended and whose words are still being read: their audio is still needed."""
        return list(self._read)

    def check_whole(self, turn: UserTurn) -> None:
        """``turn``, held on one word, ended: its whole audio decides, a word alone included."""
        turn.barge_check = asyncio.create_task(self._check(turn, turn.audio(), self._echo_over(turn), whole=True))
        self.reading(turn, turn.barge_check)

    def check_short(self, turn: UserTurn) -> None:
        """``turn``, over the agent, ended short of a barge-in check, and the agent went on: a stop word in its
        words stops the agent all the same. "Stop.", "No." and "Wait." said at once hold 160 to 320 ms of
        speech (Piper's, over the echo rig's rooms), and the check waits for 250; no short noise or
        acknowledgement over the echo was read with one (docs/results/bargein.md)."""
        if self._session.control.turn_detection.interrupt_response:
            # With the word's last sounds past its last speech window: read without them, "Stop." was "stuff"
            # and "No." "Now" (scripts/bargein_eval over short words).
            echo = self._echo_over(turn, SPEECH_TAIL_SAMPLES)
            self.reading(turn, asyncio.create_task(self._stop_if_told(turn, echo)))

    async def _stop_if_told(self, turn: UserTurn, echo: tuple[np.ndarray, np.ndarray, int, int] | None) -> None:
        session = self._session
        try:
            text = await self._words(turn, echo, SPEECH_TAIL_SAMPLES)
        except Exception:
            logs.log_exception(log, "session %s: reading a short turn over the agent failed", session.id)
            return
        reply = session.floor.reply
        if reply is None or not self.policy.has_stop_word(text):
            log.log(logs.words_level(), "session %s: no stop word in a short turn over the agent: %r", session.id, text)
            return
        if session.settings.barge_in_ignore_echo and self._is_own_voice(turn, text, reply, echo_out=echo is not None):
            log.log(logs.words_level(), "session %s: the agent's own voice: %r", session.id, text)
            self.echo_heard = True
            return
        self._yield_to(turn, text)
        session.commit(turn)

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
        reading = await self._session.stt.read(audio)
        noise = judge_noise and self.policy.is_noise(reading.text, reading.no_speech, spoken_ms)
        return "" if noise else reading.text

    async def _check(
        self,
        turn: UserTurn,
        audio: np.ndarray,
        echo: tuple[np.ndarray, np.ndarray, int, int] | None,
        whole: bool = False,
    ) -> None:
        session = self._session
        try:
            heard_until = turn.last_speech
            spoken_ms = turn.speech_ms
            if echo is not None:
                # The agent's echo under the user's sound: Whisper reads its words into it ("Okay now." for a
                # "yeah" over "... right now"), and the VAD hears speech in a cough over it.
                cleaned, speech = await asyncio.to_thread(self._speech_without_echo, *echo)
                heard_until = _speech_end(turn, speech)
                spoken_ms = float(speech.sum()) * WINDOW_MS
                if cleaned is None or (not whole and self._speech_since_judged(turn, speech) < MIN_SPEECH_WINDOWS):
                    # No speech; or none since words already judged no interruption (the echo after a "yeah"
                    # keeps the turn going, and each new reading of the same "yeah" could go wrong). Not for
                    # words the agent is held for: the suppressor took the user's next 160 ms for echo once
                    # ("over the line.", then none, then "Hold on with...": the agent resumed in between), and
                    # the whole turn's reading decides those at its end.
                    log.log(logs.words_level(), "session %s: no new speech once the echo is out", session.id)
                    if cleaned is None:
                        # The turn so far is the echo: the next look pauses the agent only for speech past it (a
                        # loud echo's residue passed one look and not the next, and paused the agent for 350 ms).
                        self._judged = {turn.id: max(self._judged.get(turn.id, 0), turn.start + echo[3])}
                    if session.floor.reply is not None and (whole or not self.holds_word(turn)):
                        self._post(Resume(session.floor.answer, USER_HOLDS, "no new speech with the echo out"))
                    return
                audio = cleaned
            reading = await session.stt.read(audio)
            log.log(
                logs.words_level(),
                "session %s: barge-in check after %.0f ms of speech, %s: %s",
                session.id,
                turn.speech_ms,
                "no echo path" if echo is None else f"echo out at lag {echo[2]}, {spoken_ms:.0f} ms of speech left",
                f"{reading.text!r}{', judged no speech' if reading.no_speech else ''}",
            )
        except Exception:
            logs.log_exception(log, "session %s: barge-in transcription failed", session.id)
            reading = Reading("?", no_speech=False)  # unknown words: treat as speech
        answer = session.floor.answer
        reply = None if answer is None else answer.reply
        if answer is None or reply is None:
            return
        self._word_held = None
        own_voice = bool(session.settings.barge_in_ignore_echo) and self._is_own_voice(
            turn, reading.text, reply, echo_out=echo is not None
        )
        hearing = Hearing(
            reading.text,
            reading.no_speech,
            spoken_ms,
            over_echo=echo is not None,
            whole=whole,
            may_withdraw=turn.may_withdraw,
            own_voice=own_voice,
            stop_read_before=self._stop_read == turn.id,
        )
        self._act_on(turn, judge(hearing, self.policy), answer, heard_until, whole)

    def _act_on(self, turn: UserTurn, judgement: Judgement, answer: Answer, heard_until: int, whole: bool) -> None:
        """Carry out the verdict on a reading of ``turn``'s speech up to sample ``heard_until``."""
        session = self._session
        verdict, text = judgement.verdict, judgement.text
        if judgement.stop_read:
            self._stop_read = turn.id
        if verdict is Verdict.OWN_VOICE:
            log.log(logs.words_level(), "session %s: the agent's own voice: %r", session.id, text)
            self.echo_heard = True
            self._judged = {turn.id: heard_until}
            self._post(Resume(answer, USER_HOLDS, "its own voice"))
        elif verdict is Verdict.ACKNOWLEDGEMENT:
            log.log(logs.words_level(), "session %s: not an interruption: %r", session.id, text)
            self._judged = {turn.id: heard_until}
            self._post(Resume(answer, USER_HOLDS, "a backchannel"))
        elif verdict is Verdict.LONE_WORD:
            log.log(
                logs.words_level(), "session %s: one word over the echo, not yet an interruption: %r", session.id, text
            )
            if not whole:
                self._judged = {turn.id: heard_until}
            if session.listener.turn is not turn:  # it ended while we listened, or this read all of it
                self._post(Resume(answer, USER_HOLDS, "one word over the echo, and its turn ended"))
            elif not whole:
                self._word_held = turn.id
        elif verdict is Verdict.WAIT:
            self._read_again(turn, text, heard_until, judgement.why)
        elif verdict is Verdict.NOISE:
            log.log(logs.words_level(), "session %s: %s: %r", session.id, judgement.why, text)
            self._post(Resume(answer, USER_HOLDS, judgement.why))
        else:
            self._yield_to(turn, text)
            if session.listener.turn is not turn:
                session.commit(turn)  # it ended while we listened: answer it now that the agent is quiet

    def _read_again(self, turn: UserTurn, text: str, heard_until: int, where: str = "") -> None:
        """``text``, read in ``turn`` up to sample ``heard_until``, is not yet an interruption: the agent stays
        paused, and the words are read again as the speech grows, or whole if the turn has ended."""
        log.log(logs.words_level(), "session %s: not yet an interruption%s: %r", self._session.id, where, text)
        self._judged = {turn.id: heard_until}
        if self._session.listener.turn is turn:
            self._word_held = turn.id
        else:
            self.check_whole(turn)

    async def words_without_echo(self, turn: UserTurn, text: str) -> str:
        """The words of committed ``turn`` with the agent's echo out of its audio, for a turn that began over
        the agent; ``text``, its transcript, when no echo can be in it.

        Such a turn's transcript holds the echo's words, garbled past matching them: "goes in and m with" for a
        "mm-hmm" over "... goes well with fish"; "And I'm sorry. Yes. I'm now." for "and who is the chef?" over
        "I'm sorry, I'm" (scripts/bargein_eval's echo rig). Answered, the agent talks to itself. A turn that
        interrupted the agent was judged words already: Whisper's doubt about the whole of it does not undo that.
        """
        if not turn.began_over_agent or (echo := self._echo_over(turn, SPEECH_TAIL_SAMPLES)) is None:
            return text
        try:
            return await self._words(turn, echo, SPEECH_TAIL_SAMPLES, judge_noise=turn.over_agent)
        except Exception:
            logs.log_exception(log, "session %s: transcribing without the echo failed", self._session.id)
            return text

    def not_for_agent(self, turn: UserTurn, text: str) -> bool:
        """Whether committed ``turn`` is none of the agent's business: no words, a backchannel over it, its own voice."""
        session = self._session
        if not has_words(text) or (turn.over_agent and self.policy.is_backchannel(self._without_echo_tail(turn, text))):
            log.log(logs.words_level(), "session %s: turn %d had no words for the agent: %r", session.id, turn.id, text)
            session.emit(TurnIgnored(turn.id))
            return True
        if self.echoes_last_answer(turn, text):
            log.log(logs.words_level(), "session %s: turn %d was the agent's own voice: %r", session.id, turn.id, text)
            self.echo_heard = True
            return True
        return False

    def echoes_last_answer(self, turn: UserTurn, text: str) -> bool:
        """A "turn" that began as the last answer's final words came back (a speakerphone's echo tail)."""
        session = self._session
        if not session.settings.barge_in_ignore_echo or self._finished is None:
            return False
        if self._echo_free and not self.echo_heard:
            return False  # "Four." said as an answer ended was taken for its "... your order." (endpointing eval)
        reply, ended_at = self._finished
        began_at = session.listener.timeline.arrival_time(turn.start)
        if began_at > ended_at + ECHO_TAIL_S:
            return False
        spoken_s = (turn.last_speech - turn.start) / PIPELINE_RATE
        return self.policy.is_own_voice(text, timed_chunks(reply), reply.heard_s(), spoken_s, WHOLE_ECHO_SHARE)

    def _without_echo_tail(self, turn: UserTurn, text: str) -> str:
        """``text`` without the last answer's final words: a "yeah" over the agent runs on into their echo
        ("Yeah, I'm not." over "... I'm not sure"), and then the turn is only the "yeah"."""
        if not self._session.settings.barge_in_ignore_echo or self._finished is None:
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

    def _yield_to(self, turn: UserTurn, text: str) -> None:
        session = self._session
        log.info("session %s: barge-in after %.0f ms of speech", session.id, turn.speech_ms)
        log.log(logs.words_level(), "session %s: the words that interrupted: %r", session.id, text)
        turn.over_agent = False
        session.announce(turn)
        answer = session.floor.answer
        if (
            answer is not None
            and answer.turn_start is not None
            and (turn.may_withdraw or session.merge.began_in_grace(turn))
        ):
            session.merge.withdraw(turn, answer.turn_start)
        else:
            session.interrupt()
