"""User speech while the agent has the floor: the barge-in checks (the echo half is :mod:`.own_voice`).

The rule of when to pause, check or stop is :class:`~.barge_in.BargeInPolicy`;
this runs its transcriptions and acts on them through the floor: it pauses
and resumes the reply the user hears, and hands the floor to the user. An
answer the user interrupts within the grace after it began is withdrawn
instead (the graceful way out: the user was not done, and the turn reaches
back to the one it answered).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import log as logs
from ..audio import PIPELINE_RATE
from ..engines.interfaces import Reading
from ..engines.vad import WINDOW, WINDOW_MS
from ..protocols.events import Metrics, SpeechStarted, TurnIgnored
from .answer import USER_HOLDS, Answer, Hold
from .barge_in import BargeIn, Hearing, Judgement, Verdict, judge
from .floor import Announced, Floor, FloorEvent, FloorState, HandOver, Pause, Resume, Withdraw, Yield
from .own_voice import MIN_SPEECH_WINDOWS, OwnVoice, SessionParts
from .user_turn import SPEECH_TAIL_SAMPLES, UserTurn

log = logging.getLogger(__name__)

# Speech at the onset that fades holds the agent's pause this long for more: over the echo a user's first
# syllables come as lone windows about 60 ms apart. Well within the output lead, so the pause of a lone
# window ends before the client's buffer runs dry (docs/results/bargein.md).
ONSET_HOLD_S = 2 * WINDOW_MS / 1000
ONSET_CHAIN_MAX_S = 1.0  # lone speech windows close together keep the agent silent this long at most
GOES_ON_S = 0.3  # speech this soon after an ignored turn over the agent goes on from it


def _speech_end(turn: UserTurn, speech: np.ndarray) -> int:
    """The sample just past the last of ``speech``'s windows, counted from ``turn``'s start; 0 for none."""
    return turn.start + (int(np.flatnonzero(speech)[-1]) + 1) * WINDOW if speech.any() else 0


def _later(timer: asyncio.TimerHandle | None, seconds: float, *call: Any) -> asyncio.TimerHandle:
    """A timer for ``call`` in place of ``timer``."""
    if timer is not None:
        timer.cancel()
    return asyncio.get_running_loop().call_later(seconds, *call)


def held_at_onset(answer: Answer | None) -> bool:
    """Whether a speech window in the grace, before it made a turn, paused ``answer``."""
    return answer is not None and answer.reply is not None and answer.held_by(Hold.GRACE_ONSET)


class Interruptions(OwnVoice):
    def __init__(
        self,
        floor: Floor,
        parts: SessionParts,
        interrupting: Callable[[], bool],
        commit: Callable[[UserTurn], None],
    ):
        super().__init__(parts)
        self._floor = floor
        self.overlap_ms_total = 0.0  # agent voice heard by a user who was not done, over the session
        self._grace_taken: Answer | None = None  # the user went on within its grace: their turn may withdraw it
        self._interrupting = interrupting  # the client lets speech interrupt the agent
        self._commit = commit
        self._look: asyncio.Task | None = None  # is speech left once the echo is out? (the pause waits for it)
        self._hold_look: asyncio.Task | None = None  # the same, for speech held at the onset (_look_at_hold)
        self._read: dict[UserTurn, asyncio.Task] = {}  # turns that ended, and the reading that decides them
        self._judged: dict[int, int] = {}  # turn id: the input up to which its speech was judged no interruption
        self._onset_timer: asyncio.TimerHandle | None = None  # ends the onset's pause with the output lead
        self._fade_timer: asyncio.TimerHandle | None = None  # ends it ONSET_HOLD_S after its speech faded
        self._onset_began = 0.0
        self._onset_start = 0  # the sample its speech began at
        self._short_timer: asyncio.TimerHandle | None = None  # ends a pause for speech short of a check
        self._onset_spent = False  # this run of speech paused the agent once already
        self._onset_over_echo = False  # that pause may be for the agent's echo: the echo test ends it
        self._word_held: int | None = None  # the turn whose one word keeps the agent paused (is_lone_word)
        self._stop_read: int | None = None  # the turn over the echo that a reading found a stop word in
        self._ignored: tuple[int, int] | None = None  # the last turn over the agent ignored: start, last speech

    def _post(self, event: FloorEvent) -> None:
        self._floor.transition(event)

    # What the listener asks (OverAgent).

    def begin_turn(self, start: int) -> tuple[int, bool]:
        """Speech makes a turn from sample ``start``: where it really starts, and whether it is over the agent."""
        answer = self._floor.answer
        if answer is not None and answer.heard_nothing:  # one turn, not two; the client hears of the new first
            if answer.turn_start is not None:
                start = answer.turn_start
            if answer.turn_id is not None:
                self._emit(TurnIgnored(answer.turn_id, merged=True))
            self._post(Withdraw(report=False))
        elif self._in_grace() or held_at_onset(answer):
            # The user goes on right after the agent began: they were only pausing. Silent at once; if it is
            # words, the answer is withdrawn.
            self._post(Pause(answer, Hold.TURN, "the user went on within the grace"))
            self._post(HandOver(answer, Hold.GRACE_ONSET, Hold.TURN))  # this turn took the onset's pause over
            self._grace_taken = answer
        if self._floor.state not in (FloorState.SPEAKING, FloorState.PAUSED):
            return start, False
        # An interruption's first word, ignored short of a check just before, stays part of its words.
        ignored, self._ignored = self._ignored, None
        if ignored is not None and start - ignored[1] <= GOES_ON_S * PIPELINE_RATE:
            start = max(self._listener().timeline.start, min(start, ignored[0]))
        return start, True

    def kept_start(self) -> int | None:
        """The earliest sample a turn that ended still needs: its words are read, or its answer may merge."""
        read = self.turns_read()
        live = [] if (turn := self._listener().turn) is None else [turn]
        starts = [turn.start for turn in read]
        if (unanswered := self.unanswered_start(live + read)) is not None:
            starts.append(unanswered)
        return min(starts, default=None)

    def speech_begins(self, start: int) -> None:
        """A speech window, its run from sample ``start``, too short yet for a turn: in the grace it pauses the
        answer at once (what the user hears of it, if they go on, is that much shorter), else the onset's pause
        may."""
        answer = self._floor.answer
        if answer is None or held_at_onset(answer):
            return
        if self._in_grace() and not answer.paused:  # not if paused for something else, which will resume it
            self._post(Pause(answer, Hold.GRACE_ONSET, "speech began within the grace"))
            return
        self._onset(start)

    def speech_faded(self) -> None:
        if held_at_onset(self._floor.answer):
            self._post(Resume(self._floor.answer, Hold.GRACE_ONSET, "the speech in the grace made no turn"))
        self._onset_faded()

    def holds_floor(self, turn: UserTurn) -> bool:
        """Whether ``turn``, over the agent, ends on a short silence, whatever its words: it has not taken the floor.

        A turn that may withdraw the answer (the user going on in the grace) waits for the end of the user's
        sentence, unless its speech stopped short of a barge-in check where the agent's echo may be in it: a
        blip of echo must not hold the agent silent until a sentence's end."""
        if not turn.over_agent or self._floor.reply is None:
            return False
        if not turn.may_withdraw:
            return True
        return turn.speech_ms < self._settings().barge_in_check_ms and self.may_hold_echo(turn)

    def user_speaks(self, turn: UserTurn) -> None:
        """Another speech window of ``turn``: the client hears of a turn not over the agent at once; over the
        agent, it is interrupted for real speech, not for "mm-hm" or a cough."""
        if not turn.over_agent:
            self.announce(turn)
        self._speaks_over(turn)

    # The graceful way out: a user who goes on after a pause was not done, so the two parts are one turn.

    def take_grace(self, answer: Answer) -> bool:
        """Whether the user went on within ``answer``'s grace: true once, for the turn that may withdraw it."""
        taken, self._grace_taken = self._grace_taken is answer, None
        return taken

    def _in_grace(self) -> bool:
        """Whether speech now means the user was not done: within the grace of the answer's first audio, in a
        session whose own voice does not come back (its echo's first speech window would pause every answer)."""
        answer = self._floor.answer
        return (
            answer is not None
            and answer.reply is not None
            and not self.echo_comes_back
            and answer.in_grace(self._clock(), self._settings().reply_grace_ms)
        )

    def began_in_grace(self, turn: UserTurn) -> bool:
        """Whether ``turn``, over the answer where the agent's echo comes back, began within the grace of its
        first audio: if it interrupts, the user was going on, not stopping the agent. Timed from the speech's
        start, not its turn's: the echo test may hide the first speech windows. Without an echo, the turn that
        takes the grace's pause decides."""
        answer = self._floor.answer
        grace_ms = self._settings().reply_grace_ms
        if not grace_ms or not self.echo_comes_back or answer is None or answer.turn_start is None:
            return False
        voiced_at = answer.voiced_at
        return voiced_at is not None and (turn.speech_began_at() - voiced_at) * 1000 <= grace_ms

    def unanswered_start(self, turns: Iterable[UserTurn]) -> int | None:
        """The start of a committed turn's audio that may yet merge with one of ``turns`` (the live turn, and
        those still being read): one that began within the grace may withdraw the answer well past it, once
        its words are checked over the echo."""
        answer = self._floor.answer
        if answer is None or not (
            answer.heard_nothing
            or answer.in_grace(self._clock(), self._settings().reply_grace_ms)
            or any(self.began_in_grace(turn) for turn in turns)
        ):
            return None
        return answer.turn_start

    def withdraw(self, turn: UserTurn, answered_start: int) -> None:
        """The user was not done: the answer goes, and ``turn`` reaches back to ``answered_start``."""
        answer, reply = self._floor.answer, self._floor.reply
        if answer is not None and answer.turn_id is not None:
            self._emit(TurnIgnored(answer.turn_id, merged=True))  # its words are this turn's now
        self._post(Withdraw())
        overlap_ms = 0.0 if reply is None else reply.heard_s() * 1000.0
        self.overlap_ms_total += overlap_ms
        log.info("session %s: answer withdrawn, the user goes on (%.0f ms of it heard)", self._id, overlap_ms)
        overlap = {"overlap_ms": round(overlap_ms, 1), "overlap_total_ms": round(self.overlap_ms_total, 1)}
        self._emit(Metrics({"turn": None if reply is None else reply.turn, "withdrawn": True, **overlap}))
        turn.extend_back(answered_start)

    async def close(self) -> None:
        for timer in (self._onset_timer, self._fade_timer, self._short_timer):
            if timer is not None:
                timer.cancel()
        tasks = list(self._read.values())
        tasks += [look for look in (self._look, self._hold_look) if look is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _onset(self, start: int) -> None:
        """A speech window over the agent, its run from sample ``start``: the agent falls silent at once, and
        goes on within the output lead if the speech fades before it makes a turn (a click, a breath); where the
        agent's echo may be in it, also unless the echo test finds speech."""
        answer = self._floor.answer
        if self._fade_timer is not None and answer is not None and answer.held_by(Hold.ONSET):
            # More speech before the faded one's pause ended: the agent stays silent for it.
            self._fade_timer.cancel()
            self._fade_timer = None
            self._onset_spent = True
            if self._clock() - self._onset_began < ONSET_CHAIN_MAX_S:
                log.debug("session %s: more speech at the onset within the hold: the agent stays paused", self._id)
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
            or not self._interrupting()
            or self.policy.min_speech_ms > self._settings().vad_min_speech_ms
        ):
            return
        self._post(Pause(answer, Hold.ONSET, "speech began over it"))
        self._onset_spent = True
        self._onset_began = self._clock()
        self._onset_start = start
        self._onset_over_echo = self.echo_heard or not self._no_echo_before(start)
        self._time_onset(answer)

    def _time_onset(self, answer: Answer) -> None:
        """Speech about the VAD's threshold makes no turn and never fades: the pause ends with the output lead.
        An earlier onset's timer never ends this pause."""
        self._onset_timer = _later(
            self._onset_timer, self._settings().output_lead_ms / 1000, self._onset_runs_out, answer
        )

    def _onset_runs_out(self, answer: Answer) -> None:
        self._onset_timer = None
        if answer.held_by(Hold.ONSET) and self._look is not None and not self._look.done():
            # The look at its turn's speech with the echo out is under way and ends the pause (or keeps it
            # for speech) in a few ms: resumed now, the agent would talk a moment before that look paused it again.
            return
        self._onset_ends(answer, "the pause at the onset ran out")

    def _onset_faded(self) -> None:
        """The speech that paused the agent at its onset made no turn: the agent goes on, unless more speech
        comes within :data:`ONSET_HOLD_S`."""
        self._onset_spent = False
        answer = self._floor.answer
        if answer is None or not answer.held_by(Hold.ONSET):
            return
        self._fade_timer = _later(self._fade_timer, ONSET_HOLD_S, self._faded_out, answer)

    def _look_at_hold(self, answer: Answer) -> None:
        """The onset's pause held over a fade is for the agent's own echo if no speech window at all is left of
        the input since the onset once the echo is out: the agent goes on at once. Not the three windows a check's
        words need: a user's first syllables, held here, may hold fewer."""
        if self._hold_look is not None and not self._hold_look.done():
            return
        echo = self._echo_between(self._onset_start, self._listener().timeline.received)
        if echo is not None:
            self._hold_look = asyncio.create_task(self._end_hold_if_echo(answer, echo))

    async def _end_hold_if_echo(self, answer: Answer, echo: tuple[np.ndarray, np.ndarray, int, int]) -> None:
        try:
            _, speech = await asyncio.to_thread(self._speech_without_echo, *echo)
        except Exception:
            logs.log_exception(log, "session %s: taking the echo out of the onset failed", self._id)
            return
        if not speech.any() and self._listener().turn is None:  # a turn's own look decides on more of it
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

    def _speaks_over(self, turn: UserTurn) -> None:
        """Another speech window of ``turn`` over the agent: interrupt it for real speech, not for "mm-hm"."""
        self._onset_spent = False
        answer = self._floor.answer
        if not self._onset_over_echo and answer is not None:
            self._post(HandOver(answer, Hold.ONSET, Hold.TURN))  # the turn's own pause and check take it from here
        if answer is None or answer.reply is None or not self._interrupting():
            return
        if self.take_grace(answer):
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
        try:
            cleaned, speech = await asyncio.to_thread(self._speech_without_echo, *echo)
        except Exception:
            logs.log_exception(log, "session %s: taking the echo out failed", self._id)
            cleaned, speech = echo[0], np.ones(len(echo[0]) // WINDOW, bool)  # unknown: treat as speech
        if self._floor.answer is not answer or self._listener().turn is not turn:
            self._onset_ends(answer, "the answer or the turn ended while the echo was taken out")
            return  # the answer, or the turn, ended meanwhile: the resume is behind us
        if cleaned is None:
            # No speech yet: a pause at the onset ends with the output lead (speech_begins) unless a window
            # with speech comes first; the user's first 100 ms over a loud echo can leave none once it is out.
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
        """Resume ``answer``, paused for ``turn`` before any check, if no speech comes within the output lead:
        speech short of ``barge_in_check_ms`` interrupts no one. The silence is counted in the input that came,
        not on the clock: a network stall is no silence."""
        if turn.barge_check is not None or turn.may_withdraw:
            return  # its check decides; or the graceful way out does
        self._look_for_silence_in(self._settings().output_lead_ms / 1000, answer, turn, turn.last_speech)

    def _look_for_silence_in(self, seconds: float, answer: Answer, turn: UserTurn, last_speech: int) -> None:
        self._short_timer = _later(self._short_timer, seconds, self._speech_stopped_short, answer, turn, last_speech)

    def _speech_stopped_short(self, answer: Answer, turn: UserTurn, last_speech: int) -> None:
        if not (
            self._floor.answer is answer
            and self._listener().turn is turn
            and turn.last_speech == last_speech
            and turn.barge_check is None
            and (self._look is None or self._look.done())
            and not answer.held_by(Hold.ONSET)  # its own timer ends that pause
        ):
            return
        short_s = (
            self._settings().output_lead_ms / 1000 - (self._listener().timeline.received - last_speech) / PIPELINE_RATE
        )
        if short_s > 0:
            self._look_for_silence_in(max(short_s, WINDOW_MS / 1000), answer, turn, last_speech)
        else:
            self._post(Resume(answer, Hold.TURN, "the speech over it stopped short of a check"))

    def _speech_since_judged(self, turn: UserTurn, speech: np.ndarray) -> int:
        """How many of ``turn``'s ``speech`` windows (from its start, the echo out) came after the input judged
        no interruption for it: a window or two there is what is left of a loud echo, as before the judgement."""
        judged = self._judged.get(turn.id)
        if judged is None:
            return int(speech.sum())
        return int(speech[max(0, (judged - turn.start) // WINDOW) :].sum())

    def turn_ends(self, turn: UserTurn) -> None:
        """``turn`` over the agent ended: a pending check decides it, or its one word read whole does; speech
        that never reached barge-in is a backchannel or noise, unless a stop word is in it. Each commits the turn
        if it interrupts."""
        if turn.barge_check is not None and not turn.barge_check.done():
            self.reading(turn, turn.barge_check)
        elif self.holds_word(turn):
            self.check_whole(turn)
        else:
            log.debug("session %s: ignoring %.0f ms of speech over the agent", self._id, turn.speech_ms)
            self._ignored = (turn.start, turn.last_speech)
            turn.drop_prepared()
            self._post(Resume(self._floor.answer, USER_HOLDS, "the speech over it ended without an interruption"))
            if turn.barge_check is None:
                self.check_short(turn)

    def announce(self, turn: UserTurn) -> None:
        """Tell the client a user turn began; over the agent, only once it interrupts."""
        if turn.announce():
            self._emit(SpeechStarted(turn.id, turn.start * 1000 // PIPELINE_RATE))
        self._post(Announced())

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
        if self._interrupting():
            # With the word's last sounds past its last speech window: without them Whisper misreads short words.
            echo = self._echo_over(turn, SPEECH_TAIL_SAMPLES)
            self.reading(turn, asyncio.create_task(self._stop_if_told(turn, echo)))

    async def _stop_if_told(self, turn: UserTurn, echo: tuple[np.ndarray, np.ndarray, int, int] | None) -> None:
        try:
            text = await self._words(turn, echo, SPEECH_TAIL_SAMPLES)
        except Exception:
            logs.log_exception(log, "session %s: reading a short turn over the agent failed", self._id)
            return
        reply = self._floor.reply
        if reply is None or not self.policy.has_stop_word(text):
            log.log(logs.words_level(), "session %s: no stop word in a short turn over the agent: %r", self._id, text)
            return
        if self._settings().barge_in_ignore_echo and self._is_own_voice(turn, text, reply, echo_out=echo is not None):
            log.log(logs.words_level(), "session %s: the agent's own voice: %r", self._id, text)
            self.echo_heard = True
            return
        self._yield_to(turn, text)
        self._commit(turn)

    async def _check(
        self,
        turn: UserTurn,
        audio: np.ndarray,
        echo: tuple[np.ndarray, np.ndarray, int, int] | None,
        whole: bool = False,
    ) -> None:
        try:
            heard_until = turn.last_speech
            spoken_ms = turn.speech_ms
            if echo is not None:
                # The agent's echo under the user's sound: Whisper reads its words into it, and the VAD hears
                # speech in a cough over it.
                cleaned, speech = await asyncio.to_thread(self._speech_without_echo, *echo)
                heard_until = _speech_end(turn, speech)
                spoken_ms = float(speech.sum()) * WINDOW_MS
                if cleaned is None or (not whole and self._speech_since_judged(turn, speech) < MIN_SPEECH_WINDOWS):
                    # No speech; or none since words already judged no interruption (each new reading of the
                    # same "yeah" could go wrong). Not for words the agent is held for: the whole turn's reading
                    # decides those at its end.
                    log.log(logs.words_level(), "session %s: no new speech once the echo is out", self._id)
                    if cleaned is None:
                        # The turn so far is the echo: the next look pauses the agent only for speech past it.
                        self._judged = {turn.id: max(self._judged.get(turn.id, 0), turn.start + echo[3])}
                    if self._floor.reply is not None and (whole or not self.holds_word(turn)):
                        self._post(Resume(self._floor.answer, USER_HOLDS, "no new speech with the echo out"))
                    return
                audio = cleaned
            reading = await self._stt.read(audio)
            log.log(
                logs.words_level(),
                "session %s: barge-in check after %.0f ms of speech, %s: %s",
                self._id,
                turn.speech_ms,
                "no echo path" if echo is None else f"echo out at lag {echo[2]}, {spoken_ms:.0f} ms of speech left",
                f"{reading.text!r}{', judged no speech' if reading.no_speech else ''}",
            )
        except Exception:
            logs.log_exception(log, "session %s: barge-in transcription failed", self._id)
            reading = Reading("?", no_speech=False)  # unknown words: treat as speech
        answer = self._floor.answer
        reply = None if answer is None else answer.reply
        if answer is None or reply is None:
            return
        self._word_held = None
        own_voice = bool(self._settings().barge_in_ignore_echo) and self._is_own_voice(
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
        verdict, text = judgement.verdict, judgement.text
        if judgement.stop_read:
            self._stop_read = turn.id
        if verdict in (Verdict.OWN_VOICE, Verdict.ACKNOWLEDGEMENT):
            log.log(logs.words_level(), "session %s: not an interruption (%s): %r", self._id, verdict.value, text)
            self.echo_heard = self.echo_heard or verdict is Verdict.OWN_VOICE
            self._judged = {turn.id: heard_until}
            self._post(Resume(answer, USER_HOLDS, verdict.value))
        elif verdict is Verdict.LONE_WORD:
            log.log(
                logs.words_level(), "session %s: one word over the echo, not yet an interruption: %r", self._id, text
            )
            if not whole:
                self._judged = {turn.id: heard_until}
            if self._listener().turn is not turn:  # it ended while we listened, or this read all of it
                self._post(Resume(answer, USER_HOLDS, "one word over the echo, and its turn ended"))
            elif not whole:
                self._word_held = turn.id
        elif verdict is Verdict.WAIT:
            self._read_again(turn, text, heard_until, judgement.why)
        elif verdict is Verdict.NOISE:
            log.log(logs.words_level(), "session %s: %s: %r", self._id, judgement.why, text)
            self._post(Resume(answer, USER_HOLDS, judgement.why))
        else:
            self._yield_to(turn, text)
            if self._listener().turn is not turn:
                self._commit(turn)  # it ended while we listened: answer it now that the agent is quiet

    def _read_again(self, turn: UserTurn, text: str, heard_until: int, where: str = "") -> None:
        """``text``, read in ``turn`` up to sample ``heard_until``, is not yet an interruption: the agent stays
        paused, and the words are read again as the speech grows, or whole if the turn has ended."""
        log.log(logs.words_level(), "session %s: not yet an interruption%s: %r", self._id, where, text)
        self._judged = {turn.id: heard_until}
        if self._listener().turn is turn:
            self._word_held = turn.id
        else:
            self.check_whole(turn)

    def _yield_to(self, turn: UserTurn, text: str) -> None:
        log.info("session %s: barge-in after %.0f ms of speech", self._id, turn.speech_ms)
        log.log(logs.words_level(), "session %s: the words that interrupted: %r", self._id, text)
        turn.over_agent = False
        self.announce(turn)
        answer = self._floor.answer
        if answer is not None and answer.turn_start is not None and (turn.may_withdraw or self.began_in_grace(turn)):
            self.withdraw(turn, answer.turn_start)
        else:
            self._post(Yield())
