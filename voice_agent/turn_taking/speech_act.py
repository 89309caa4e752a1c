"""What the user's words so far do: ask, request, greet, close the call, or tell.

A speaker who asks, requests, greets or says goodbye hands the turn over: they wait
for the agent. A speaker who tells ("Okay, well I think we're ready to
begin.", "And it's great joy.") is the one who goes on after a full stop: in
the real meeting turns of the endpointing eval, every long thinking pause
after a finished sentence came after a telling, and none after a request.
The end-of-turn decision (``turn.py``) lets a telling wait longer. Pure
functions of the transcript; English only, like the rest of the rules.
"""

from __future__ import annotations

import enum
import re


class SpeechAct(enum.Enum):
    QUESTION = "question"
    REQUEST = "request"
    CLOSING = "closing"
    GREETING = "greeting"
    TELLING = "telling"  # anything else: an informing, an opinion, an acknowledgement, a story


# The last sentence decides: "Tell me about your menu. What do you recommend?" asks.
_SENTENCES = re.compile(r"[^.!?]+[.!?]*")
_ELLIPSIS = re.compile(r"\.{2,}|…")
_LEADING_FILLERS = re.compile(r"^(?:(?:so|and|but|okay|ok|well|um|uh|oh|yes|yeah|no|hi|hello|hey|sorry|right)\b\W*)+")
_AUX = r"(?:do|does|did|is|isn't|are|aren't|was|were|can|can't|could|would|will|won't|shall|should|have|has|may|am)"
_PRONOUN = r"(?:i|you|we|they|he|she|it|there|that|this|these|those|the|a|an|my|your|our|any|anyone|anybody)"
# A question said flat, to which Whisper gave a full stop: "Do you have a table." "What time is it."
# The auxiliary must be followed by a subject, so "What I mean is" and "Is what..." stay tellings.
_QUESTION_START = re.compile(
    rf"^(?:(?:what|when|where|which|who|whose|why|how)(?:'s| {_AUX}\b| much\b| many\b| long\b| about\b| come\b)"
    rf"|(?:what|which) \w+ {_AUX}\b|{_AUX} {_PRONOUN}\b)"
)
# Words before "me" that are not a verb telling the agent what to do ("Not me.", "Like me.", "Let me see.").
_NOT_VERBS = (
    "let|not|just|only|even|also|than|as|from|by|at|on|in|without|near|after|before|between|except|but|"
    "under|over|against|around|behind|beside|into|onto|upon|within|of|to|for|with|about|like|and|or|so|"
    "told|said|gave|got|made|had|sent|all|both|you|they|he|she|it|that|this|there|who|whom|which|what|why|how|when|where|me|oh|ah"
)
# Wanting, asking and telling the agent what to do; "let me" and "wait" are holding
# phrases (turn.py), not requests.
_REQUEST = re.compile(
    r"\b(?:i'd|i would|we'd|we would|i'd really) (?:like|love|prefer)\b"
    r"|\b(?:i|we) (?:want|need|wanna|wish|require)\b"
    r"|\b(?:i'll|we'll|i will|we will) (?:have|take|go with|get)\b"
    r"|\b(?:i'm|we're|i am|we are) (?:looking for|trying to|calling (?:about|to|for))\b"
    r"|\bplease\b"
    r"|^(?:tell|give|show|send|book|reserve|cancel|change|make|add|remove|put|call|find|check|help|"
    r"repeat|say|read|explain|describe|list|recommend|order|schedule|set|stop|continue|go on|start|"
    r"play|turn|open|buy|pay|transfer|connect|text|email|remind|get me|let's|verify|confirm|fix|repair|"
    r"look up|update|forward|spell)\b"
    # Any verb said to the agent with "me" or "us" right after it is asked of it ("Verify me.", "Trust me.");
    # a sentence whose subject is dropped starts with a past or a third person ("Told me.", "Gives me...").
    rf"|^(?!(?:{_NOT_VERBS})\b)[a-z]+(?<!ed)(?<!s) (?:me|us)\b"
)
_CLOSING = re.compile(
    r"\b(?:thank you|thanks|thank you very much|bye|goodbye|good bye|bye bye|see you|"
    r"have a (?:nice|good|great) (?:day|evening|night|one)|that's all|that is all|that will be all|"
    r"that's everything|nothing else|no thanks|no thank you|that'll be it|that's about it|"
    # "That's it." alone agrees as often ("Yeah, yeah, that's it." went on, in a meeting).
    r"(?:and|so|no|think|guess) that(?:'s| is) it|that(?:'s| is) it for (?:me|now|today))\b"
)
# Whom the words are said to, before a question or a request ("computer what is the weather", "Anna, can you..."):
# a wake word, or one word and Whisper's comma.
_ADDRESS = re.compile(
    r"^(?:(?:hey|ok|okay)\W+)?(?:computer|assistant|agent|alexa|siri|google|robot|bot)\b\W*|^[a-z]+, "
)
_GREETING = re.compile(
    r"^(?:hi|hello|hey|hiya|howdy|good (?:morning|afternoon|evening)|greetings)(?: there| again| everyone)?\W*$"
)


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` that hold a word, each with its closing punctuation.

    Whisper's "..." marks a hesitation inside a sentence ("I'd like a table
    for... for people."), not its end.
    """
    text = _ELLIPSIS.sub(" ", text)
    return [s.strip() for s in _SENTENCES.findall(text) if any(c.isalnum() for c in s)]


def speech_act(transcript: str | None) -> SpeechAct:
    """What the last sentence of ``transcript`` does."""
    said = sentences(transcript or "")
    if not said:
        return SpeechAct.TELLING
    last = said[-1]
    if last.endswith("?"):
        return SpeechAct.QUESTION
    words = " ".join(last.lower().replace("’", "'").split())
    if _CLOSING.search(words):
        return SpeechAct.CLOSING
    if _GREETING.match(words):
        return SpeechAct.GREETING
    core = _LEADING_FILLERS.sub("", words)
    for said_to_whom in (core, _ADDRESS.sub("", core, count=1)):
        if _REQUEST.search(said_to_whom):
            return SpeechAct.REQUEST
        if _QUESTION_START.match(said_to_whom):
            return SpeechAct.QUESTION  # Whisper's full stop after a question said flat, or none
    return SpeechAct.TELLING


def hands_over(act: SpeechAct) -> bool:
    """Whether a speaker who does ``act`` is waiting for the agent."""
    return act is not SpeechAct.TELLING
