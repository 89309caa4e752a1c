"""Is speech heard over the agent the agent's own voice coming back?

On a speakerphone, or in a browser without echo cancellation, the agent's
voice reaches its own microphone input a little later and quieter. The
server knows what it said and when (each chunk's words and where its audio
lies in the answer), so speech whose words match the words being played
around that moment is echo, not the user. Pure functions; the barge-in
policy asks them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from difflib import SequenceMatcher

# The echo path: the client's playback, the room, the microphone and the
# network back. 50 to 250 ms on a speakerphone call; more on a jittery link.
MAX_ECHO_DELAY_S = 0.6
# Words spread evenly over a chunk's audio are placed to within about a word.
TIMING_SLACK_S = 0.6
# Whisper hears the quieter, reverberant copy imperfectly ("menu" → "menus").
WORD_SIMILARITY = 0.75
# Share of the heard words that must be found among the agent's words.
ECHO_SHARE = 0.6
# A turn that is all echo: a user's question right after an answer runs into
# the answer's echo tail and shares some of its words, but not nearly all.
WHOLE_ECHO_SHARE = 0.9

_WORD = re.compile(r"[a-z0-9']+")


@dataclass(frozen=True)
class TimedWord:
    word: str
    at_s: float  # where in the answer's audio the word is said


def words_of(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("-", " "))


def timed_words(chunks: Iterable[tuple[str, float, float]]) -> list[TimedWord]:
    """The agent's words placed in its audio: each chunk ``(text, start_s, end_s)`` spread evenly."""
    placed: list[TimedWord] = []
    for text, start_s, end_s in chunks:
        words = words_of(text)
        step = (end_s - start_s) / max(len(words), 1)
        placed += [TimedWord(word, start_s + (i + 0.5) * step) for i, word in enumerate(words)]
    return placed


def is_echo(heard: str, spoken: list[TimedWord], from_s: float, to_s: float, share: float = ECHO_SHARE) -> bool:
    """Whether the words ``heard`` are the agent's own, played between ``from_s`` and ``to_s``.

    ``from_s`` and ``to_s`` are positions in the answer's audio: where the
    client was playing when the overlapping speech began and when it was last
    heard. Words the agent said up to an echo delay before that span count.
    No words at all is not echo: a cough is for the backchannel rules.
    """
    # A lone letter is a fragment or a hum, not evidence either way ("No, n" for "No, not").
    heard_words = [word for word in words_of(heard) if len(word) > 1 or word in ("i", "a")]
    if not heard_words:
        return False
    earliest, latest = from_s - MAX_ECHO_DELAY_S - TIMING_SLACK_S, to_s + TIMING_SLACK_S
    candidates = [w.word for w in spoken if earliest <= w.at_s <= latest]
    if not candidates:
        return False
    found = sum(any(_similar(word, candidate) for candidate in candidates) for word in heard_words)
    return found >= share * len(heard_words)


def others_words(heard: str, spoken: list[TimedWord], from_s: float, to_s: float) -> str:
    """The words of ``heard`` that are not the agent's own, played between ``from_s`` and ``to_s`` (as :func:`is_echo`)."""
    earliest, latest = from_s - MAX_ECHO_DELAY_S - TIMING_SLACK_S, to_s + TIMING_SLACK_S
    candidates = [w.word for w in spoken if earliest <= w.at_s <= latest]
    return " ".join(word for word in words_of(heard) if not any(_similar(word, said) for said in candidates))


def _similar(heard: str, said: str) -> bool:
    # Whisper cuts the last word of the audio short ("No, I-" for "No, I'm"): a prefix counts.
    return heard == said or said.startswith(heard) or SequenceMatcher(None, heard, said).ratio() >= WORD_SIMILARITY
