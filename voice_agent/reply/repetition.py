"""Repetition in an answer: the loop guard that stops it, and the measures the answers eval reports.

A small model can fall into a loop inside one sentence ("You can get to
double double double ...") where no chunk repeats a whole earlier chunk. The
guard watches the words as they stream and says when the answer loops: the
same word a third time in a row, or a run of ``NGRAM`` words that already
occurred in the answer. The reply then drops the unfinished text and ends the
answer at what was already spoken. A repeated trigram alone is allowed:
"we open at nine on weekdays and at ten, we open at" is not a loop yet.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[\w']+")
# A word is complete once a character that cannot continue it has arrived.
_COMPLETE_WORD = re.compile(r"[\w']+(?=[^\w'])")

MAX_WORD_RUN = 2  # "no, no" is speech; "double double double" is a loop
NGRAM = 4


def spoken_words(text: str) -> list[str]:
    """The lower-cased words of ``text``, as repetition is counted."""
    return _WORD.findall(text.lower())


def longest_word_run(words: list[str]) -> int:
    """The longest run of one word said again and again."""
    longest = run = 0
    for i, word in enumerate(words):
        run = run + 1 if i and word == words[i - 1] else 1
        longest = max(longest, run)
    return longest


def repeated_trigram_share(words: list[str]) -> float:
    """The share of the word trigrams that already occurred earlier: 0 for none, near 1 for a loop."""
    trigrams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    if not trigrams:
        return 0.0
    return (len(trigrams) - len(set(trigrams))) / len(trigrams)


class LoopGuard:
    """Feed an answer's text deltas with :meth:`push`; it returns True once the answer loops."""

    def __init__(self) -> None:
        self._pending = ""  # text whose last word may not be complete yet
        self._words: list[str] = []
        self._ngrams: set[tuple[str, ...]] = set()
        self.looped = False

    def push(self, delta: str) -> bool:
        if self.looped:
            return True
        self._pending += delta
        end = 0
        for match in _COMPLETE_WORD.finditer(self._pending):
            end = match.end()
            if self._add(match.group().lower()):
                self.looped = True
                break
        self._pending = self._pending[end:]
        return self.looped

    def _add(self, word: str) -> bool:
        """Take the next complete word; True if it makes the answer loop."""
        self._words.append(word)
        if self._words[-MAX_WORD_RUN - 1 :] == [word] * (MAX_WORD_RUN + 1):
            return True
        if len(self._words) >= NGRAM:
            ngram = tuple(self._words[-NGRAM:])
            if ngram in self._ngrams:
                return True
            self._ngrams.add(ngram)
        return False
