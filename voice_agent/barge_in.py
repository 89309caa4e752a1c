"""When user speech over the agent interrupts it: real words do, "mm-hm" and a cough do not.

Past ``barge_in_min_speech_ms`` of speech the agent pauses, as a person would,
while it finds out; past ``barge_in_check_ms`` the overlapping speech is
transcribed, and only words beyond the backchannel list interrupt; past
``barge_in_force_ms`` the agent stops whatever the words. A user who goes on
is checked again every ``BARGE_RECHECK_MS`` of new speech. This module holds
the decisions; the session runs the transcriptions and acts on them.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable

from .config import Settings
from .echo import ECHO_SHARE, is_echo, timed_words, words_of

BARGE_RECHECK_MS = 160  # more overlapping speech since the last check: look again


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
