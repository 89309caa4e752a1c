"""Split streaming LLM text into speakable chunks.

The first chunk may end at a clause (a comma, colon, semicolon or dash) once
it has a few words, so speech starts early, and the second once it has six,
so it is ready before the first has played; later chunks are whole sentences,
which Piper phrases better. A boundary is only accepted once the character
after the punctuation is seen, so "3.14", "1,000" and "e.g." never split;
except at the end of the first chunk, where the punctuation after a whole
word (two letters or more, not an abbreviation) ends the chunk at once: the
LLM's next token, 12 to 25 ms on 2 cores, is a wait the user hears, and a
word of letters is not a number or an initial.

With ``phrase_breaks``, the first chunk may also end where a phrase begins
without punctuation: before "for" in "I'm sorry for any confusion," or before
"on" in "I'm not available on Sundays." Piper's time for the first chunk and
the tokens the LLM must write before it both grow with its words, and the
first chunk is the one the user waits for; the rest is synthesized while it plays.

Text without punctuation is still cut into chunks of at most
``MAX_CHUNK_CHARS``: at its last clause boundary, else before a word that
begins a phrase, else between two words. With ``max_sentences``, the chunker
ends the answer after that many sentences (a line, or a chunk cut for length,
counts as one), so a model that ignores "answer in one or two sentences"
still stops at a sentence boundary; :attr:`SentenceChunker.done` tells the
reply to stop generating. With ``rewrite`` (the reply passes ``speakable``),
each chunk is rewritten before it is counted, and one left without words is
dropped: a code fence or a table rule is not one of the answer's sentences.
"""

from __future__ import annotations

import re
from collections.abc import Callable

SENTENCE_END = ".!?…"
CLAUSE_END = ",;:—"
CLOSERS = "\"')]}”’"

# Lower-cased words that end with a dot without ending a sentence.
ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e a.m p.m approx dept est
    inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed
    thu fri sat sun u.s u.k fig vol ca cf al""".split()
)

# A chunk never grows past this: Piper's time for it, and the wait before it
# is spoken, grow with it. About 40 words.
MAX_CHUNK_CHARS = 220
# The second chunk is written and synthesized while the first, a few words,
# plays; a whole run-on sentence took longer than that and the client's player
# ran dry for 2 s (scripts/bargein_eval, "We have a lot of different things, |
# and I'm not really happy to recommend anything, but ..."). So the second
# chunk may end at a clause too, once it has this many words.
SECOND_CHUNK_MIN_WORDS = 6

_WORD = re.compile(r"[\w']+")

# Words that begin a phrase (prepositions, conjunctions, relatives): a listener
# hears a small pause before them as natural phrasing.
PHRASE_STARTS = frozenset(
    """for to with without in on at by from of about into over after before
    until since during than like and but or so because if unless although though
    when while where which who that as""".split()
)
# A whole word after a space: the character after it must have arrived ("for" is not "forty").
_NEXT_WORD = re.compile(r"\s+([\w']+)(?=[^\w'])")


def word_tokens(text: str) -> list[str]:
    """The words of ``text`` with their apostrophes, punctuation left out, as the chunker counts them."""
    return _WORD.findall(text)


class SentenceChunker:
    """Feed text deltas with :meth:`push`; call :meth:`flush` at the end of the stream."""

    def __init__(
        self,
        first_chunk_min_words: int = 2,
        phrase_breaks: bool = False,
        max_sentences: int = 0,
        rewrite: Callable[[str], str] | None = None,
    ):
        self.first_chunk_min_words = first_chunk_min_words
        self.phrase_breaks = phrase_breaks
        self.max_sentences = max_sentences  # 0: no limit
        self.rewrite = rewrite
        self._buffer = ""
        self._emitted = 0
        self._sentences = 0

    @property
    def done(self) -> bool:
        """True once ``max_sentences`` sentences are out: the rest of the answer is dropped."""
        return 0 < self.max_sentences <= self._sentences

    def push(self, delta: str) -> list[str]:
        self._buffer += delta
        chunks: list[str] = []
        while not self.done and (boundary := self._find_boundary()) is not None:
            end, ends_sentence = boundary
            chunk, self._buffer = self._buffer[:end], self._buffer[end:]
            self._add(chunks, chunk, ends_sentence)
        return chunks

    def flush(self) -> list[str]:
        chunks: list[str] = []
        if not self.done:
            self._add(chunks, self._buffer, ends_sentence=True)
        self._buffer = ""
        return chunks

    def _add(self, chunks: list[str], chunk: str, ends_sentence: bool) -> None:
        chunk = " ".join(chunk.split())
        if self.rewrite is not None:
            chunk = self.rewrite(chunk)
        if _WORD.search(chunk):
            chunks.append(chunk)
            self._emitted += 1
            self._sentences += ends_sentence

    def _find_boundary(self) -> tuple[int, bool] | None:
        """(index just past the first acceptable boundary in the buffer, whether it ends a sentence), or None."""
        text = self._buffer
        clause_min_words = {0: self.first_chunk_min_words, 1: SECOND_CHUNK_MIN_WORDS}.get(self._emitted)
        phrase = self._phrase_break(text) if self._emitted == 0 and self.phrase_breaks else None
        for i, char in enumerate(text[: MAX_CHUNK_CHARS + 1]):
            if i == phrase:
                return i, False
            if char in SENTENCE_END:
                end = _skip_closers(text, i + 1)
                if end < len(text) and text[end].isspace() and not _is_abbreviation(text, i):
                    if not _is_list_number(text, i):
                        return end, True
            elif char == "\n":
                return i + 1, True
            elif char in CLAUSE_END and i + 1 < len(text) and text[i + 1].isspace():
                if clause_min_words is not None and len(word_tokens(text[:i])) >= clause_min_words:
                    return i + 1, False
        if (
            self._emitted == 0
            and len(text) <= MAX_CHUNK_CHARS + 1
            and (early := self._first_chunk_end(text)) is not None
        ):
            return early
        if len(text) > MAX_CHUNK_CHARS:
            return _forced_cut(text), True
        return None

    def _first_chunk_end(self, text: str) -> tuple[int, bool] | None:
        """The first chunk ends at punctuation it ends with, after a whole word: no later token can make it
        "1,000" or "Dr. Smith"."""
        last = len(text) - 1
        if not _ends_a_word(text, last):
            return None
        if text[last] in SENTENCE_END and not _is_abbreviation(text, last):
            return last + 1, True
        if text[last] in CLAUSE_END and len(word_tokens(text[:last])) >= self.first_chunk_min_words:
            return last + 1, False
        return None

    def _phrase_break(self, text: str) -> int | None:
        """Index of the space before the first phrase start with enough words before it, or None."""
        for match in _NEXT_WORD.finditer(text):
            if (
                match.group(1).lower() in PHRASE_STARTS
                and len(word_tokens(text[: match.start()])) >= self.first_chunk_min_words
            ):
                return match.start()
        return None


def _forced_cut(text: str) -> int:
    """Where to cut ``text``, longer than ``MAX_CHUNK_CHARS`` and without a sentence end in it.

    At its last clause boundary, else before the last word that begins a
    phrase in the second half, else before the last word, else (one endless
    token) at the limit.
    """
    head = text[: MAX_CHUNK_CHARS + 1]
    clauses = [i + 1 for i, char in enumerate(head[:-1]) if char in CLAUSE_END and head[i + 1].isspace()]
    if clauses:
        return clauses[-1]
    phrases = [
        match.start()
        for match in _NEXT_WORD.finditer(head)
        if match.group(1).lower() in PHRASE_STARTS and match.start() >= MAX_CHUNK_CHARS // 2
    ]
    if phrases:
        return phrases[-1]
    first_word = len(head) - len(head.lstrip())
    spaces = [i for i, char in enumerate(head) if char.isspace() and i > first_word]
    return spaces[-1] if spaces else MAX_CHUNK_CHARS


def _ends_a_word(text: str, index: int) -> bool:
    """The punctuation at ``index`` follows a word of two letters or more ("sorry," not "1," or "J."), and no
    quote or bracket is open before it (its closer would follow: 'He said "hi!"')."""
    head = text[:index]
    if not head or not head[-1].isalpha() or sum(c.isalpha() for c in word_tokens(head)[-1]) < 2:
        return False
    return head.count('"') % 2 == 0 and all(head.count(a) <= head.count(b) for a, b in ("()", "[]", "“”", "‘’"))


def _is_list_number(text: str, dot_index: int) -> bool:
    """A dot after a chunk that is only a number is a list item's ("1. Preheat the oven."), not a sentence end."""
    return text[dot_index] == "." and text[:dot_index].strip().isdigit()


def _skip_closers(text: str, index: int) -> int:
    while index < len(text) and text[index] in CLOSERS + SENTENCE_END:
        index += 1
    return index


def _is_abbreviation(text: str, dot_index: int) -> bool:
    if text[dot_index] != ".":
        return False
    start = dot_index
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    word = text[start:dot_index].lower().lstrip("\"'([{“‘")
    if len(word) == 1 and word.isalpha():
        return True  # an initial, as in "J. Smith"
    return word in ABBREVIATIONS
