"""Where to cut a pause into a whole synthesized utterance: at a word boundary.

A turn like "I want to go to ... Boston." made of two separately synthesized
parts ends its first part with the voice's sentence-final fall, which no
speaker who pauses to think makes. Synthesizing the whole utterance once and
cutting the pause in between two of its words keeps the intonation of a
speaker who is going on. The words are placed with faster-whisper's word
timestamps, matched to the written text by their letters and digits (Whisper
writes "five five five zero" as "555-0"); those are only a guide, so the cut
goes to whichever dip in the level near there splits the audio best into the
words before and after it, judged by transcribing both sides.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .measure import levels_db

UNITS = {w: str(d) for d, w in enumerate("zero one two three four five six seven eight nine".split())}
TENS = {w: str(d) for d, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
SEARCH_S = 0.4  # how far around Whisper's boundary to look for the gap between the words
CANDIDATES = 8  # dips judged by transcribing both sides
MIN_WORD_S = 0.15  # between two cuts: the shortest word
WINDOW_S = 0.01
FADE_S = 0.005  # at each side of a cut, so that it does not click


class AlignmentError(ValueError):
    """Whisper's words do not spell the text up to a cut."""


@dataclass(frozen=True)
class Word:
    text: str
    start: float  # seconds
    end: float


def spelled(words: Sequence[str]) -> list[str]:
    """Each written word as the letters and digits Whisper would write for it.

    "forty two" is "4", "2" (Whisper writes 42), "forty" alone is "40",
    "five" is "5": number words become digits, everything else loses its
    case and punctuation.
    """
    out = []
    plain = [re.sub(r"[^a-z0-9]", "", w.lower()) for w in words]
    for index, word in enumerate(plain):
        following = plain[index + 1] if index + 1 < len(plain) else ""
        if word in TENS:
            out.append(TENS[word] + ("" if following in UNITS and following != "zero" else "0"))
        elif word in UNITS:
            out.append(UNITS[word])
        else:
            out.append(word)
    return out


def boundary_time(text_words: Sequence[str], heard: Sequence[Word], count: int) -> tuple[float, float]:
    """The stretch of time in which the ``count``-th word of the text ends and the next begins.

    When Whisper heard as many words as were written, by position, whatever it
    took them for ("um" as "on"). Otherwise the written letters and digits are
    aligned with Whisper's (difflib), so that a misheard word ("live" as
    "love") or several spoken words written as one ("555-0192") still place
    the boundary: between two of Whisper's words, or inside one by the share
    of its characters.
    """
    if len(heard) == len(text_words):
        return heard[count - 1].end, max(heard[count].start, heard[count - 1].end)
    written = spelled(text_words)
    target = len("".join(written[:count]))
    pieces = [re.sub(r"[^a-z0-9]", "", word.text.lower()) for word in heard]
    matcher = difflib.SequenceMatcher(None, "".join(written), "".join(pieces), autojunk=False)
    blocks = [block for block in matcher.get_matching_blocks() if block.size and block.a < target]
    if not blocks:  # Whisper did not hear the words before the cut ("Hmm."): by their share of the letters
        share = target / max(1, len("".join(written)))
        at = heard[0].start + share * (heard[-1].end - heard[0].start)
        return at, at
    last = blocks[-1]
    position = last.b + min(target - last.a, last.size)
    stream = 0
    for index, (word, piece) in enumerate(zip(heard, pieces)):
        if stream + len(piece) == position:
            after = heard[index + 1].start if index + 1 < len(heard) else word.end
            return word.end, max(after, word.end)
        if stream < position < stream + len(piece):
            at = word.start + (position - stream) / len(piece) * (word.end - word.start)
            return at, at
        stream += len(piece)
    raise AlignmentError(f"Whisper heard {' '.join(w.text for w in heard)!r}: the cut falls after its last word")


def candidates(audio: np.ndarray, rate: int, around_s: float, most: int = CANDIDATES) -> list[int]:
    """The quietest dips of the level (10 ms windows) within ``SEARCH_S`` of ``around_s``, as samples."""
    window = int(rate * WINDOW_S)
    first = max(0, int((around_s - SEARCH_S) * rate))
    levels = levels_db(audio[first : min(len(audio), int((around_s + SEARCH_S) * rate))], window)
    dips = [
        i
        for i in range(len(levels))
        if (i == 0 or levels[i] <= levels[i - 1]) and (i + 1 == len(levels) or levels[i] <= levels[i + 1])
    ]
    dips.sort(key=lambda i: levels[i])
    return [first + i * window + window // 2 for i in dips[:most]]


def likeness(written: Sequence[str], heard: str) -> float:
    """0 to 1: how alike the written words and a transcript are, letter by letter (digits as Whisper writes them)."""
    return difflib.SequenceMatcher(
        None, "".join(spelled(written)), "".join(spelled(heard.split())), autojunk=False
    ).ratio()


def best_cut(
    audio: np.ndarray,
    rate: int,
    text_words: Sequence[str],
    count: int,
    around_s: float,
    transcribe: Callable[[np.ndarray], str],
    after: int = 0,
) -> int:
    """The dip near ``around_s`` where the audio splits best into the first ``count`` words and the rest.

    Whisper's word timestamps are only a guide (tiny.en's are often 100 ms or
    more off): each candidate dip is judged by transcribing the two sides.
    Only dips at least ``MIN_WORD_S`` past sample ``after`` (the previous cut) count.
    """
    found = [c for c in candidates(audio, rate, around_s) if c >= after + MIN_WORD_S * rate]
    if not found:
        raise AlignmentError(f"no dip in the level near {around_s:.2f} s")
    head, tail = text_words[:count], text_words[count:]
    return max(found, key=lambda c: likeness(head, transcribe(audio[:c])) + likeness(tail, transcribe(audio[c:])))


def insert_pauses(audio: np.ndarray, rate: int, cuts: Sequence[tuple[int, float]]) -> np.ndarray:
    """The audio with ``seconds`` of digital silence at each (sample, seconds), faded in and out at the cut."""
    fade = int(rate * FADE_S)
    pieces, previous = [], 0
    for sample, seconds in sorted(cuts):
        piece = audio[previous:sample].copy()
        piece[-fade:] *= np.linspace(1.0, 0.0, min(fade, len(piece)), dtype=np.float32)
        if previous:
            piece[:fade] *= np.linspace(0.0, 1.0, min(fade, len(piece)), dtype=np.float32)
        pieces += [piece, np.zeros(int(seconds * rate), np.float32)]
        previous = sample
    last = audio[previous:].copy()
    if previous:
        last[:fade] *= np.linspace(0.0, 1.0, min(fade, len(last)), dtype=np.float32)
    return np.concatenate([*pieces, last])
