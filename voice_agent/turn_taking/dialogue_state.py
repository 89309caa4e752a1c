"""What the agent's last words ask for, and whether the user's words so far answer it.

After "What's your phone number?" a pause after "five five five" is the user
reading the next group; after "Would you like a dessert?" a bare "Yes." is a
whole answer. Both are lost on the transcript rules alone, which must treat
"Yes." as done and "555." as a draw (turn.py). Pure functions of two strings.
"""

from __future__ import annotations

import enum
import re

from .speech_act import SpeechAct, sentences, speech_act
from .turn import LOCAL_NUMBER_DIGITS, Completeness


class Expectation(enum.Enum):
    OPEN = "open"  # anything may follow: no opinion
    YES_NO = "yes_no"
    PHONE = "phone"
    DATE = "date"
    EMAIL = "email"
    SPELLING = "spelling"


# A question that asks for a value; checked in this order ("spell your email" is spelling).
_ASKS_FOR = (
    (Expectation.SPELLING, re.compile(r"\b(?:spell|spelled|spelling|letter by letter)\b")),
    (Expectation.EMAIL, re.compile(r"\be-?mail\b")),
    (
        Expectation.PHONE,
        re.compile(r"\b(?:phone|telephone|mobile|cell|callback|contact)(?: number)?\b|\bnumber\b.*\breach\b"),
    ),
    (
        Expectation.DATE,
        re.compile(
            r"\b(?:what|which) (?:date|day)\b|\bwhen\b.*\b(?:arrive|come|book|come in|visit|like|want|need)\b|\bdate\b"
        ),
    ),
)
_YES_NO_START = re.compile(
    r"^(?:so |and |okay,? |great,? |alright,? )?"
    r"(?:do|does|did|is|are|was|were|can|could|would|will|shall|should|have|has|may|might|am|isn't|aren't|don't|"
    r"doesn't|won't|wouldn't|shouldn't|haven't|hasn't)\b"
)
# "Is that a table for two or four?" offers a choice, not a yes/no.
_CHOICE = re.compile(r"\bor\b")

YES_NO_ANSWERS = frozenset(
    """yes yeah yep yup sure okay ok alright right correct exactly absolutely definitely certainly
    no nope nah never please thanks thank you of course that's it fine great perfect sounds good not really""".split()
)
_WORD = re.compile(r"[a-z']+")
_DIGIT_WORDS = {w: str(i) for i, w in enumerate("zero one two three four five six seven eight nine".split())} | {
    "oh": "0",
    "o": "0",
    "double": "",
}
_MONTHS = (
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec"
).split()
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday weekend".split()
_RELATIVE_DAYS = re.compile(r"\b(?:today|tonight|tomorrow|next week|this week|day after tomorrow)\b")
_DAY_NUMBER = re.compile(r"\b\d{1,2}(?:st|nd|rd|th)?\b|\b(?:first|second|third|fourth|fifth|\w+teenth|\w+tieth)\b")
_NUMERIC_DATE = re.compile(r"\b\d{1,4}[/.-]\d{1,2}(?:[/.-]\d{1,4})?\b")
_EMAIL = re.compile(r"\S+@\S+\.[a-z]{2,}\b|\bat\b.+\bdot (?:com|org|net|edu|io|co|uk|de|fr)\b")
_LONE_LETTER = re.compile(r"(?:^|[\s,.-])[a-z](?:\W*)$")
_SPELLING_DONE = re.compile(r"\b(?:that's it|that is it|that's all|thanks|thank you)\W*$")


def expectation(agent_text: str | None) -> Expectation:
    """What the agent's last question asks the user for ("" or None: nothing asked)."""
    if not agent_text:
        return Expectation.OPEN
    said = sentences(agent_text.lower())
    questions = [s for s in said if s.endswith("?")]
    # The last question counts; a request ("Please spell your name.") counts too if it is last. A statement
    # does not: "I'm not sure about the date." asks for nothing.
    last = questions[-1] if questions else said[-1] if said and _asks_without_a_question(said[-1]) else ""
    for kind, pattern in _ASKS_FOR:
        if pattern.search(last):
            return kind
    if last.endswith("?") and _YES_NO_START.search(last) and not _CHOICE.search(last):
        return Expectation.YES_NO
    return Expectation.OPEN


_SPELL_OUT = re.compile(r"^(?:now |so |and |okay,? )?(?:spell|enter|type)\b")


def _asks_without_a_question(sentence: str) -> bool:
    """A request for something: "Please spell your name.", "Tell me your number.", "Spell it for me."."""
    return speech_act(sentence) is SpeechAct.REQUEST or _SPELL_OUT.search(sentence) is not None


# "How can I help?" and "Anything else?" ask for a request, not for a value: the user's
# reply may be a story that goes on, so it gets no answer's haste.
_OPEN_OFFER = re.compile(
    r"\b(?:help|assist|do for you|anything else|something else|what else|what can i|how can i|how may i)\b"
)


def asks_for_answer(agent_text: str | None) -> bool:
    """Whether the agent's last words are a question the user's next words answer ("How many people?")."""
    if not agent_text:
        return False
    said = sentences(agent_text.lower())
    return bool(said) and said[-1].endswith("?") and not _OPEN_OFFER.search(said[-1])


def answer_completeness(expected: Expectation, user_text: str | None) -> Completeness | None:
    """Whether ``user_text`` looks like a whole answer to what was asked; None: no opinion."""
    if user_text is None or expected is Expectation.OPEN:
        return None
    if user_text.rstrip().endswith("?"):
        return None  # asked back ("Do you have anything on Friday?"): no answer, a question, whole as it is
    text = user_text.lower().strip()
    if not _WORD.search(text) and not any(c.isdigit() for c in text):
        return None
    if expected is Expectation.YES_NO:
        words = _WORD.findall(text)
        bare = " ".join(words)
        if bare in YES_NO_ANSWERS or (words and all(w in YES_NO_ANSWERS for w in words) and len(words) <= 3):
            return Completeness.COMPLETE
        return None
    if expected is Expectation.PHONE:
        if _refuses(text):
            return None
        return Completeness.COMPLETE if _digits(text) >= LOCAL_NUMBER_DIGITS else Completeness.INCOMPLETE
    if expected is Expectation.DATE:
        if _refuses(text):
            return None
        return Completeness.COMPLETE if _has_date(text) else Completeness.INCOMPLETE
    if expected is Expectation.EMAIL:
        if _refuses(text):
            return None
        return Completeness.COMPLETE if _EMAIL.search(text) else Completeness.INCOMPLETE
    # Spelling: a letter may always be followed by another; only words after the letters close it.
    if _SPELLING_DONE.search(text):
        return Completeness.COMPLETE
    return Completeness.INCOMPLETE if _LONE_LETTER.search(text) else None


def _digits(text: str) -> int:
    count = sum(c.isdigit() for c in text)
    words = _WORD.findall(text)
    for i, word in enumerate(words):
        digit = _DIGIT_WORDS.get(word)
        if digit is None:
            continue
        if word == "double":  # "double five": two digits
            count += 1 if i + 1 < len(words) and words[i + 1] in _DIGIT_WORDS else 0
        elif word not in ("o", "oh") or i > 0:
            count += 1
    return count


def _has_date(text: str) -> bool:
    words = set(_WORD.findall(text))
    if words & set(_WEEKDAYS) or _RELATIVE_DAYS.search(text) or _NUMERIC_DATE.search(text):
        return True
    # "March." alone is half a date; "the 5th of" without the month too.
    return bool(words & set(_MONTHS)) and bool(_DAY_NUMBER.search(text))


_REFUSAL = re.compile(r"\b(?:no|don't|do not|rather not|not sure|why|what for|skip)\b")


def _refuses(text: str) -> bool:
    """The user answers something else ("I'd rather not.", "Why?"): the rules decide."""
    return bool(_REFUSAL.search(text)) and not any(c.isdigit() for c in text)
