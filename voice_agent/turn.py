"""End-of-turn decisions from VAD silence plus the transcript so far.

A pause after a complete sentence ends the turn quickly; a pause after "and",
"the", "um" or a number is probably the user thinking, so it waits longer.
"""

from __future__ import annotations

import enum
import re

# Words after which a speaker almost always goes on, even when Whisper has
# already put a full stop after them ("I'd like a table for."). Whisper writes
# a thinking "hmm" as "m" too (the endpointing eval's hmm_vegetarian turn).
CONTINUING_WORDS = frozenset(
    """and or but because if although though unless than
    a an the my your his her our their every
    to of at for from with into onto between
    um uh er erm hmm hm mm m i'm i'd i'll plus minus""".split()
)

# Words that often end a finished sentence ("That's what I like."), so they only
# count as trailing when no sentence punctuation follows them.
MAYBE_CONTINUING_WORDS = frozenset(
    """so then when while since until that which who whom whose where as
    this these those its some any each in on by about over under through
    like well i we you is are was were be been am do does did have has had
    can could would should will shall may might must not very really just also""".split()
)

# Prepositions that end a finished question ("What are you interested in?") but
# rarely a statement: Whisper writes a full stop after a pause in "We arrive
# on ... Friday" ("We to arrive on.") and after "and" misheard ("A cheeseburger
# in."), so with a full stop they count as trailing.
PREPOSITIONS = frozenset("in on by about".split())

# Phrases that ask for time to think: the user has the floor until they go on.
HOLDING_PHRASES = (
    "let me see",
    "let me think",
    "let me check",
    "let's see",
    "hold on",
    "wait a second",
    "wait a minute",
    "one moment",
    "one second",
    "just a moment",
    "just a second",
    "give me a second",
)

_LAST_WORD = re.compile(r"([\w']+)\W*$")
_HOLDING = re.compile(r"\b(?:" + "|".join(re.escape(p).replace("'", "'?") for p in HOLDING_PHRASES) + r")\W*$")
_WORD = re.compile(r"\w")
# A phone number is said in groups with pauses between them ("555 ... 0192");
# fewer digits than a local number after "number is" is the first group.
LOCAL_NUMBER_DIGITS = 7
_PHONE_NUMBER = re.compile(
    r"\b(?:phone(?: number)?(?: is|'s)?|number(?: is|'s)|(?:call|reach|text) me(?: at| on)?) ([\d\s,.\-]*)$"
)


class Completeness(enum.Enum):
    COMPLETE = "complete"
    UNKNOWN = "unknown"
    INCOMPLETE = "incomplete"


def has_words(transcript: str | None) -> bool:
    """Whisper sometimes returns only punctuation ("." or "...") for a noise."""
    return transcript is not None and _WORD.search(transcript) is not None


def classify(transcript: str | None) -> Completeness:
    """How likely the user is done, from the words so far; None: words not known yet."""
    if transcript is None:
        return Completeness.INCOMPLETE
    text = transcript.strip()
    if not has_words(text):
        return Completeness.UNKNOWN
    if text.endswith(("...", "…", ",", "-", "—", ":", ";")):
        return Completeness.INCOMPLETE
    lowered = text.lower()
    if _HOLDING.search(lowered):
        return Completeness.INCOMPLETE
    match = _LAST_WORD.search(lowered)
    if match:
        word = match.group(1)
        if word in CONTINUING_WORDS:
            return Completeness.INCOMPLETE
        if word.isdigit():
            if _is_partial_phone_number(lowered):
                return Completeness.INCOMPLETE
            # "I live at 42." and "We arrive at 7:30." look the same; waiting the
            # incomplete silence after both made every answer ending in a number the
            # slowest turn of the benchmark, so Whisper's full stop makes it a draw.
            return Completeness.UNKNOWN if text[-1] in ".!?" else Completeness.INCOMPLETE
        if text[-1] not in ".!?" and word in MAYBE_CONTINUING_WORDS:
            return Completeness.INCOMPLETE
        if text[-1] == "." and word in PREPOSITIONS:
            return Completeness.INCOMPLETE
    if text[-1] in ".!?":
        return Completeness.COMPLETE
    return Completeness.UNKNOWN


def _is_partial_phone_number(text: str) -> bool:
    """Whether the text ends in the first digits of a phone number ("my number is 555.")."""
    match = _PHONE_NUMBER.search(text)
    return match is not None and 0 < sum(c.isdigit() for c in match.group(1)) < LOCAL_NUMBER_DIGITS


class TurnDetector:
    def __init__(
        self,
        complete_ms: int = 350,
        default_ms: int = 600,
        incomplete_ms: int = 2000,
        max_turn_s: float = 30.0,
    ):
        self._silence_ms = {
            Completeness.COMPLETE: complete_ms,
            Completeness.UNKNOWN: default_ms,
            Completeness.INCOMPLETE: incomplete_ms,
        }
        self.max_turn_ms = max_turn_s * 1000.0

    def required_silence_ms(self, transcript: str | None) -> int:
        return self._silence_ms[classify(transcript)]

    def is_turn_over(self, silence_ms: float, transcript: str | None, turn_ms: float = 0.0) -> bool:
        if turn_ms >= self.max_turn_ms:
            return True
        return silence_ms >= self.required_silence_ms(transcript)
