"""When user speech over the agent interrupts it: real words do, "mm-hm" and a cough do not.

Past ``barge_in_min_speech_ms`` of speech the agent pauses; past
``barge_in_check_ms`` the speech is read, again every ``BARGE_RECHECK_MS``, and
only words beyond the backchannels interrupt; past ``barge_in_force_ms`` it
stops whatever the words. Pure decisions: :mod:`.interruptions` runs the reads.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..config import Settings
from ..echo import ECHO_SHARE, is_echo, timed_words, words_of
from ..engines.vad import WINDOW_MS

BARGE_RECHECK_MS = 160  # more overlapping speech since the last check: look again
# Words that stop no one, heard over the echo, interrupt once their turn ends only if they held this much
# speech with the echo out: Whisper read "It's fine." into a door slam and "in a moment." into a "mm-hmm"
# over the echo (scripts/bargein_eval; 416 and 320 ms of speech), and the agent gave up its answer to them.
# "Tell me more." takes about 600 ms.
WORDS_OVER_ECHO_MIN_MS = 500
# A stop word Whisper judges no speech in less speech than this, over the agent, is a noise's (is_noise).
STOP_WORD_MIN_MS = 4 * WINDOW_MS


# Words that stop a speaker on their own. Over the agent's echo, Whisper reads a
# noise, or what is left of the echo, as a single word ("out", "down", "but", "you"
# in scripts/bargein_eval's echo rig); any other lone word waits for more speech.
# A word that begins with one of four letters or more counts too: "cancelled", "stopping".
# Not "enough": it is what Whisper made of a "mm-hmm" over the echo in three rig runs, and once offline in
# the same check's audio; "That's enough." still stops the agent, as words.
STOP_WORDS = frozenset(
    """wait stop no nope hold hang sorry pardon excuse hey what cancel quiet actually listen
    hello repeat again""".split()
)

# What Whisper writes for a noise or near-silence, learnt from its training subtitles: no one's words.
# "Thank you for watching." was its reading of a door slam over the echo, and "I'm gonna go to the end of the
# video." of noises over it in four runs, once clearing the agent for a laugh (scripts/bargein_eval).
_HALLUCINATIONS = re.compile(
    r"\b(?:thank you (?:so much )?for watching|thanks for watching|please subscribe"
    r"|i'm (?:gonna|going to) go to the end of the video"
    r"|subtitles by(?: the amara org community)?|transcribed by)\b"
)

_VOWEL = re.compile(r"[aeiouy]")
# A consonant alone that no hum or filler is spelt with: the first sound of a word the check cut off ("x" for
# the "Ac" of "Actually" after 200 ms, in three of scripts/bargein_eval's echo-rig runs).
_CUT_OFF = re.compile(r"[bcdfgjklpqrstvwxz]")
_HUM = re.compile(r"[mnh]{2,}[aeiou]?")  # Whisper's spellings of "mm-hmm": "NMO", "NMA" ("no" is a word)


def _stops(word: str) -> bool:
    return any(word == stop or (len(stop) >= 4 and word.startswith(stop)) for stop in STOP_WORDS)


def _is_hum(word: str) -> bool:
    """A hum, not a word to interrupt with: "n", "nm", "hmm", "shh", "nmo"."""
    return (len(word) == 1 and word != "i") or _VOWEL.search(word) is None or _HUM.fullmatch(word) is not None


class BargeIn(enum.Enum):
    NONE = "none"  # too little speech to matter: the agent goes on
    PAUSE = "pause"  # the agent falls silent; no new check now
    CHECK = "check"  # the agent falls silent and the words are checked
    INTERRUPT = "interrupt"  # the agent stops, whatever the words
    LISTEN = "listen"  # the words are checked while the agent goes on: its own voice came back before


class BargeInPolicy:
    def __init__(self, min_speech_ms: float, check_ms: float, force_ms: float, backchannels: Iterable[str]):
        self.min_speech_ms = min_speech_ms
        self.check_ms = check_ms
        self.force_ms = force_ms
        phrases = {" ".join(p.lower().replace("-", " ").split()) for p in backchannels}
        phrases.discard("")
        # Longest first, so that "mm hm" is taken whole before "mm".
        alternatives = "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))
        self._backchannels = re.compile(rf"\b(?:{alternatives})\b") if phrases else None

    @classmethod
    def from_settings(cls, settings: Settings) -> BargeInPolicy:
        return cls(
            settings.barge_in_min_speech_ms,
            settings.barge_in_check_ms,
            settings.barge_in_force_ms,
            settings.barge_in_backchannels,
        )

    def decide(self, speech_ms: float, checked_ms: float, checking: bool, echo_heard: bool = False) -> BargeIn:
        """What ``speech_ms`` of speech over the agent calls for.

        ``checked_ms`` is the speech when the last check started (0 for none),
        ``checking`` whether a check is still running. ``echo_heard``: the
        agent's own voice has come back in this session (a speakerphone), so
        speech over it is likely more of it: the agent keeps talking until the
        words say otherwise, rather than pausing for its own voice.
        """
        if speech_ms < self.min_speech_ms:
            return BargeIn.NONE
        # Long speech stops the agent whatever the words, unless its own voice comes
        # back: then speech over it lasts as long as it talks, and the words decide.
        if self._backchannels is None or (speech_ms >= self.force_ms and not echo_heard):
            return BargeIn.INTERRUPT
        if speech_ms < self.check_ms or checking or speech_ms - checked_ms < BARGE_RECHECK_MS:
            return BargeIn.NONE if echo_heard else BargeIn.PAUSE
        return BargeIn.LISTEN if echo_heard else BargeIn.CHECK

    @staticmethod
    def is_own_voice(
        heard: str, chunks: list[tuple[str, float, float]], playing_s: float, spoken_s: float, share: float = ECHO_SHARE
    ) -> bool:
        """Whether ``heard`` is the agent's answer coming back (:mod:`.echo`).

        ``chunks`` are the answer's (text, start, end) in its audio,
        ``playing_s`` where its playback is now, ``spoken_s`` how long the
        overlapping speech lasts; ``share`` of the heard words must be the agent's.
        """
        return is_echo(heard, timed_words(chunks), playing_s - spoken_s, playing_s, share)

    @staticmethod
    def is_lone_word(text: str) -> bool:
        """One word that does not stop a speaker on its own (:data:`STOP_WORDS`)."""
        words = words_of(text)
        return len(words) == 1 and not _stops(words[0])

    @staticmethod
    def is_cut_off(text: str) -> bool:
        """A consonant alone: a word begun, which more speech may finish, not a hum ("m", "n", "h")."""
        words = words_of(text)
        return len(words) == 1 and _CUT_OFF.fullmatch(words[0]) is not None

    def is_noise(self, text: str, no_speech: bool, spoken_ms: float) -> bool:
        """Whether ``text``, read in ``spoken_ms`` of speech over the agent (``no_speech``: Whisper judged it no
        speech), is Whisper's reading of a noise: words it judges no speech itself, with no stop word among
        them. "I'm gonna be a good one." for a hiss, "That's it." for a laugh over the rig's echo were so judged;
        none of the eval's interruptions over it was, but a "Wait." alone was, once (docs/results/bargein.md). A stop
        word so judged is a noise's too where it is shorter than any said: a door slam over the echo left 96 ms
        of speech, read "No." twice, and cleared the answer; a "Stop.", "No." or "Wait." said at once keeps
        160 ms or more (scripts/bargein_eval)."""
        return no_speech and (not self.has_stop_word(text) or spoken_ms < STOP_WORD_MIN_MS)

    @staticmethod
    def has_stop_word(text: str) -> bool:
        """Whether a word of ``text`` stops a speaker on its own ("No, I meant Friday", "Wait, what?")."""
        return any(_stops(word) for word in words_of(text))

    def is_backchannel(self, text: str) -> bool:
        """Only acknowledgement words, or no words at all (a cough, a door).

        A lone letter other than "I", letters without a vowel, or "m", "n" and
        "h" with a vowel at the end are a hum, not a word: Whisper wrote "N",
        "Nm", "NMO" and "NMA" for "Mm-hmm." (scripts/bargein_eval). Whisper's
        stock readings of noise ("Thank you for watching.") are no words either.
        A user who goes on is checked again as the speech grows.
        """
        words = " ".join(re.sub(r"[^a-z' ]", " ", text.lower().replace("-", " ")).split())
        words = _HALLUCINATIONS.sub("", words)
        if self._backchannels is not None:
            words = self._backchannels.sub("", words)
        return all(_is_hum(word) for word in words.split())


class Verdict(enum.Enum):
    """What a reading of speech over the agent is (:func:`judge`)."""

    OWN_VOICE = "own voice"  # the agent's own words coming back: it goes on
    ACKNOWLEDGEMENT = "acknowledgement"  # a backchannel, a hum, a cough: it goes on
    NOISE = "noise"  # too little speech for the words read over the echo: it goes on
    LONE_WORD = "lone word"  # one word over the echo: held while its turn goes on, on once it ends
    WAIT = "wait for more"  # not yet an interruption: held, read again as the speech grows, whole once it ends
    STOP = "stop"  # the user takes the floor


@dataclass(frozen=True)
class Hearing:
    """A reading of speech over the agent, and what the verdict on it depends on."""

    text: str
    no_speech: bool  # Whisper judged the audio no speech
    spoken_ms: float  # speech in the audio read (with the echo out, what is left)
    over_echo: bool  # the agent's echo was taken out of the audio read
    whole: bool  # the whole turn, which has ended
    may_withdraw: bool  # the user went on within the grace: they were not done
    own_voice: bool  # the words are the agent's own, coming back
    stop_read_before: bool  # an earlier reading of this turn over the echo held a stop word


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    text: str  # the words it stands on: none for a noise's
    stop_read: bool = False  # this reading, over the echo, holds a stop word: a second one stops the agent
    why: str = ""


def judge(hearing: Hearing, policy: BargeInPolicy) -> Judgement:
    """The verdict on a reading of speech over the agent: pure, the STT and the echo's removal are done."""
    h = hearing
    if h.own_voice:
        return Judgement(Verdict.OWN_VOICE, h.text)
    # A noise's words, once they are not the agent's (its echo, however unsure the reading). Not in the grace:
    # there the user most likely goes on with their turn, which may be quiet (a meeting's "Okay.").
    noise = policy.is_noise(h.text, h.no_speech, h.spoken_ms) and not h.may_withdraw
    text = "" if noise else h.text
    # A consonant alone is a word the check cut off, which more speech finishes ("x", then "Actually"): the
    # agent stays paused for it as for a lone word, not resumed as for a hum. So is the first of a noise,
    # which may be a user's first syllable. Read from the whole turn, either is a noise.
    cut_off = not h.whole and (noise or policy.is_cut_off(text))
    if not cut_off and policy.is_backchannel(text):
        if h.may_withdraw and not h.whole:
            # The user went on right after the agent began: a filler or a hum there is their next words
            # begun more often than an acknowledgement ("Um." for the first 256 ms of "... the pasta", in
            # the endpointing eval; resumed, the answer talked over them for 800 ms more). The agent stays
            # silent: the words are read again as the speech grows, and whole once it ends.
            return Judgement(Verdict.WAIT, text, why=", in the grace")
        return Judgement(Verdict.ACKNOWLEDGEMENT, text)
    lone = cut_off or policy.is_lone_word(text)
    if h.over_echo and lone:
        # Over the echo, one word alone is what is left of it, or a noise read as a word ("out" for an
        # "uh-huh", in the echo rig), or the first of the user's ("one." for "Hold on"): judged again once
        # more speech comes, the agent held paused meanwhile (resumed between the readings, it talked on for
        # 130 ms before "Hold on." paused it again); it goes on once the turn ends. Its own word is OWN_VOICE.
        return Judgement(Verdict.LONE_WORD, text)
    stop = policy.has_stop_word(text)
    # Over the echo, a stop word read once may be a noise ("What?" for knocks, "No." for a laugh, "enough"
    # for a "mm-hmm", in the echo rig): it stops the agent once a second reading of the turn holds one
    # too, or the whole turn's does. The agent is paused meanwhile: only its clear waits.
    stop_read = h.over_echo and stop
    first_stop = stop_read and not h.stop_read_before
    if not h.whole and (lone or (h.over_echo and (not stop or first_stop))):
        # Judged again once more speech comes, still paused: a user who goes on has stopped the agent
        # already. If none comes, the whole turn's audio decides once it ends: Whisper read a hum's
        # first 300 ms as "in", and the whole of it as "NMM" (scripts/bargein_eval). Over the echo the
        # same holds for words that stop no one: what is left of the echo under an "mm-hmm" or a laugh
        # read as "in the thumb." or "You're just a bit" (the echo rig).
        return Judgement(Verdict.WAIT, text, stop_read)
    if h.over_echo and h.spoken_ms < WORDS_OVER_ECHO_MIN_MS and not stop:
        return Judgement(Verdict.NOISE, text, stop_read, why="too little speech for words over the echo")
    return Judgement(Verdict.STOP, text, stop_read)
