"""End-of-turn decisions: how much silence ends the turn, from what the signals say.

The transcript rules (``classify``) read a pause after a complete sentence as
likely the end, and one after "and", "the", "um" or a number as the user
thinking; the LLM's end-of-utterance probability, the dialogue state (what
the agent asked for) and an audio end-of-turn model move a turn between those
levels (``fused_completeness``); a statement closed by every signal is told in
full (``told_in_full``) and hands the turn over. ``TurnDetector`` turns them
into a silence: by default (``--turn-decision rules``) a silence per level;
with ``learned``, the fitted model's (``turn_model.py``), the silence at which
the chance that the user is done outweighs the cost of a cut-in.
docs/turn-taking.md ("The decision") has the measurements behind the numbers.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Protocol

from .pause_habit import PauseHabit
from .speech_act import SpeechAct, hands_over, sentences, speech_act

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
# A question may end in one of these: "Is there anything else I can help you with?", "Where are you from?",
STRANDED_PREPOSITIONS = frozenset("to of at for from with into".split())
# when the preposition's object stands earlier in the sentence, as a wh-word or an indefinite. "Can I get a
# table for?" has none: Whisper's "?" at a pause before "six".
_FRONTED_OBJECT = re.compile(
    r"\b(?:what|which|who|whom|whose|where|anything|something|everything|nothing|anyone|someone|everyone|else)\b"
)

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
    "give me a minute",
    "just a minute",
    "bear with me",
)

# A sentence that announces what comes next ("The thing is ...", "What I mean is ..."): Whisper puts a
# full stop after its "is" at the pause, and the rest of it is what the user has to say.
_ANNOUNCING = re.compile(
    r"(?:^|[.!?]\s+)(?:(?:well|so|and|but|okay|ok|yeah|um|uh)\W+)*"
    r"(?:(?:the|my|our|your|one) (?:thing|problem|point|question|issue|reason|truth|idea|plan|trouble|fact)"
    r"|what i (?:mean|want|need|think|said)) is\W*$"
)
# "Wait." or "No, wait." opening a sentence, not "I can wait.": the user is about to correct themselves.
_WAIT = re.compile(r"(?:^|[.!?]\s+)(?:(?:no|oh|uh|um|okay|ok|sorry)\W+)*wait\W*$")
_LAST_WORD = re.compile(r"([\w']+)\W*$")
# A filler phrase leaves the clause open after Whisper's full stop too ("Okay, um, we, um, you know."), like "um".
_TRAILING_FILLER = re.compile(r"\b(?:you know|i mean|kind of|sort of)\W*$")
# Digits after an article or a possessive qualify a noun still to come: "this one was a 2018 ... Tesla".
_NUMBER_BEFORE_ITS_NOUN = re.compile(r"\b(?:a|an|the|my|your|his|her|our|their|this|that) [\d,.]*\d\W*$")
# "Give me just one second here.": a word or two of where or please after it still asks for the time.
_HOLDING = re.compile(
    r"\b(?:"
    + "|".join(re.escape(p).replace("'", "'?") for p in HOLDING_PHRASES)
    + r")(?:\W+(?:here|there|please|now|okay|ok|sorry|for me))*\W*$"
)
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
    if _HOLDING.search(lowered) or _WAIT.search(lowered) or _ANNOUNCING.search(lowered):
        return Completeness.INCOMPLETE
    if _TRAILING_FILLER.search(lowered) or _NUMBER_BEFORE_ITS_NOUN.search(lowered):
        return Completeness.INCOMPLETE
    match = _LAST_WORD.search(lowered)
    if match:
        word = match.group(1)
        if word in CONTINUING_WORDS and not (text[-1] == "?" and _stranded(lowered, word)):
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


def _asks_ending_stranded(transcript: str) -> bool:
    """A question by its form that ends in a preposition a question may end in, with no "?" from Whisper.

    "Is there anything else I can help you with." is as finished as with its "?"; a question whose preposition
    has nothing earlier to be about ("Can I get a table for.") is not, and the LLM has the last word."""
    lowered = transcript.lower()
    match = _LAST_WORD.search(lowered)
    return match is not None and _stranded(lowered, match.group(1)) and speech_act(transcript) is SpeechAct.QUESTION


def _stranded(lowered: str, last_word: str) -> bool:
    """Whether ``last_word`` is a preposition whose object stands earlier in the last sentence."""
    said = sentences(lowered)
    return last_word in STRANDED_PREPOSITIONS and bool(said) and _FRONTED_OBJECT.search(said[-1]) is not None


def _is_partial_phone_number(text: str) -> bool:
    """Whether the text ends in the first digits of a phone number ("my number is 555.")."""
    match = _PHONE_NUMBER.search(text)
    return match is not None and 0 < sum(c.isdigit() for c in match.group(1)) < LOCAL_NUMBER_DIGITS


# The LLM's log probability of the end-of-turn token after the user's words,
# with the agent's last words in the prompt (llm.base.LLMBackend.end_of_turn_logprob).
# Below LLM_UNFINISHED the sentence is broken off ("I have been using a demo":
# -21, "my flight lands": -16, on the real and synthetic turns); a finished
# question scores above LLM_FINISHED (-0.06 to -0.39 for the benchmark's
# questions); a complete-looking sentence below LLM_UNSURE is a short reply
# that often goes on ("That sounds good.": -3.1, "Okay.": -2.8, then more).
LLM_UNFINISHED = -8.0
LLM_UNSURE = -2.5
LLM_FINISHED = -1.2
# A question Whisper ended with "?" hands the turn over at a lower probability:
# a greeting before it ("Hello, are you open tonight?": -1.44) or a thanks
# ("Thank you, what time do you close?") costs the end token some of it, and the
# "?" already says the user waits for an answer. The real group's sentences
# before a thinking pause score -2.1 to -21, and are tellings.
LLM_FINISHED_QUESTION = -2.0
# A telling the LLM scores at or above this, complete by every other signal too,
# is told in full and hands the turn over (``told_in_full``): chosen by the sweep
# in experiments/turn_model/told_sweep.py on the synthetic groups, checked on
# the real meeting turns (docs/turn-taking.md, "Why these defaults").
LLM_TOLD = -2.0
# Smart Turn's probability that the speaker is done, from the sound of the last
# words: below this, a complete-looking sentence was said with a rising or level
# voice.
AUDIO_FINISHED = 0.5


@dataclass(frozen=True)
class TurnSignals:
    """What is known about the user's words at one moment of a pause. None: not known (yet)."""

    transcript: str | None
    end_of_turn_logprob: float | None = None
    answer: Completeness | None = None  # dialogue_state.answer_completeness: does it answer what was asked?
    audio_end_probability: float | None = None
    agent_asked: bool = False  # dialogue_state.asks_for_answer: the agent's last words asked for an answer
    # Signals asked about these words are still out (the LLM's, Smart Turn's): see TurnDetector.
    pending: bool = False


def fused_completeness(signals: TurnSignals) -> Completeness:
    """The transcript rules, moved by the other signals where they disagree."""
    if signals.transcript is None:
        return Completeness.INCOMPLETE
    if signals.answer is not None:
        # "555" after "What's your phone number?" goes on; "Yes." after a yes/no question is done.
        return signals.answer
    level = classify(signals.transcript)
    logprob = signals.end_of_turn_logprob
    if logprob is not None:
        if logprob < LLM_UNFINISHED:
            level = Completeness.UNKNOWN if level is Completeness.COMPLETE else Completeness.INCOMPLETE
        elif level is Completeness.COMPLETE and logprob < LLM_UNSURE:
            level = Completeness.UNKNOWN
        elif level is Completeness.UNKNOWN and logprob >= LLM_FINISHED:
            level = Completeness.COMPLETE  # "We will arrive at around 730."
        elif level is Completeness.INCOMPLETE and logprob >= LLM_FINISHED and _asks_ending_stranded(signals.transcript):
            level = Completeness.COMPLETE  # "Is that anything else I can help you with." with Whisper's full stop
    audio = signals.audio_end_probability
    if audio is not None and level is Completeness.COMPLETE and audio < AUDIO_FINISHED:
        level = Completeness.UNKNOWN
    return level


# Endings that leave a telling open even after Whisper's full stop: the subject pronouns
# MAYBE_CONTINUING_WORDS does not hold ("and then they.").
OPEN_ENDINGS = MAYBE_CONTINUING_WORDS | frozenset("he she they".split())


def told_in_full(signals: TurnSignals) -> bool:
    """A sentence complete by every signal: Whisper's final punctuation, a last word that leaves nothing
    open (no filler, conjunction, article, preposition, pronoun, auxiliary or number), and an LLM that
    calls it finished (at least LLM_TOLD); no LLM reading, no verdict.

    On a phone call such a statement hands the turn over ("I don't think so, and that's it."); a speaker
    thinking inside a clause leaves one of these signals open ("this one was a", "Okay, um, we, um, you know").
    """
    text, logprob = signals.transcript, signals.end_of_turn_logprob
    if text is None or logprob is None or logprob < LLM_TOLD:
        return False
    if classify(text) is not Completeness.COMPLETE or fused_completeness(signals) is not Completeness.COMPLETE:
        return False
    match = _LAST_WORD.search(text.strip().lower())
    return match is not None and match.group(1) not in OPEN_ENDINGS and not match.group(1).isdigit()


# "7:30", "at around 730", "by 19.30", "seven pm": a time of day is a whole value. Digits alone are one only
# after a word that takes a time: "this one was a 2018" is a year, and the clause goes on ("... Tesla").
# "round" too: Whisper hears "at around 730" as "at round 730" at times.
_TIME_OF_DAY = re.compile(
    r"(?:\b(?:[01]?\d|2[0-3]):[0-5]\d"
    r"|\b(?:at|around|round|about|by|until|till|before|after|from|to|and|or) (?:[01]?\d|2[0-3])[.]?[0-5]\d"
    r"|\b\d{1,2} ?(?:am|pm|a\.m|p\.m|o'clock))\W*$",
    re.I,
)


def _ends_in_a_time(transcript: str | None) -> bool:
    return transcript is not None and _TIME_OF_DAY.search(transcript) is not None


# What a user waits for the agent after: a greeting is often followed by the reason for the call.
_WAITS_FOR_THE_AGENT = (SpeechAct.QUESTION, SpeechAct.REQUEST, SpeechAct.CLOSING)


def signals_agree_it_is_over(signals: TurnSignals) -> bool:
    """A question, a request or a goodbye, or the answer to the agent's question, that no signal doubts, and
    at least two signals back.

    A user who asks for something or says goodbye is waiting for the agent;
    so is one who has just answered what the agent asked for. None of the
    real meeting turns' thinking pauses came after one of these that the LLM
    called finished (docs/turn-taking.md, "The decision").
    """
    if signals.transcript is None:
        return False
    if signals.answer is Completeness.COMPLETE:
        return True
    if fused_completeness(signals) is not Completeness.COMPLETE:
        return False
    act = speech_act(signals.transcript)
    if act not in _WAITS_FOR_THE_AGENT:
        return False
    logprob, audio = signals.end_of_turn_logprob, signals.audio_end_probability
    if logprob is None and audio is None:
        return False
    asked = act is SpeechAct.QUESTION and signals.transcript.rstrip().endswith("?")
    finished = LLM_FINISHED_QUESTION if asked else LLM_FINISHED
    return (logprob is None or logprob >= finished) and (audio is None or audio >= AUDIO_FINISHED)


class SilenceModel(Protocol):
    """What the detector asks of a fitted end-of-turn model (``turn_model.TurnModel``)."""

    def silence_for(self, signals: TurnSignals, probability: float) -> float: ...


class TurnDetector:
    """How much silence ends the turn: the fitted model's (``cut_in_cost`` given), or the rules' levels."""

    def __init__(
        self,
        complete_ms: int = 350,
        default_ms: int = 600,
        incomplete_ms: int = 2000,
        max_turn_s: float = 120.0,
        confident_ms: int = 200,
        telling_ms: int | None = None,
        habit: PauseHabit | None = None,
        cut_in_cost: float | None = None,
        model: SilenceModel | None = None,
        told_ms: int | None = None,
    ):
        self._silence_ms = {
            Completeness.COMPLETE: complete_ms,
            Completeness.UNKNOWN: default_ms,
            Completeness.INCOMPLETE: incomplete_ms,
        }
        self.confident_ms = min(confident_ms, complete_ms)
        # A finished telling may be followed by more ("Yes. ... And a dessert?"); a
        # question, a request or a goodbye hands the turn over. None: tellings wait like them.
        self.telling_ms = complete_ms if telling_ms is None else max(telling_ms, complete_ms)
        # A telling told in full (``told_in_full``) never waits longer than one left open, and the user's
        # pause habit does not hold it. None: it waits the complete silence.
        self.told_ms = complete_ms if told_ms is None else min(max(told_ms, complete_ms), self.telling_ms)
        self.max_turn_ms = max_turn_s * 1000.0
        self.habit = PauseHabit() if habit is None else habit
        self.model = model
        # Answering now costs ``cut_in_cost`` with the chance that the user goes on; waiting costs one wait
        # with the chance that they are done: answer once P(done) > cost / (cost + 1).
        # Bounded so that a cost of 0 or a huge one still gives a silence between the shortest and the longest.
        self.commit_probability = (
            None if cut_in_cost is None else min(max(cut_in_cost / (cut_in_cost + 1.0), 0.01), 0.99)
        )

    def required_silence_ms(self, signals: TurnSignals | str | None) -> int:
        """The silence that ends the turn; a bare transcript is the words alone.

        Words not in yet, and words whose signals are still out, wait the longest that any words could ask
        for, until what is missing comes in. Under load the transcript of a pause comes late, and its
        signals later still: read at once, the words alone would end a pause that the signals, in time at
        one session, hold ("I'd like to book a table" that the LLM calls broken off). So the decision is
        taken on the evidence it would have at one session, only later. Signals the decision does not read
        (an answer to the agent's question decides alone) are not waited for."""
        if not isinstance(signals, TurnSignals):
            signals = TurnSignals(signals)
        waits_for_signals = signals.pending and not (signals.answer is not None and self.model is None)
        if signals.transcript is None or waits_for_signals:
            return self.longest_ms()
        if self.model is None or self.commit_probability is None:
            return self._rules_silence_ms(signals)
        longest = self._silence_ms[Completeness.INCOMPLETE]
        silence = self.model.silence_for(signals, self.commit_probability)
        # Never inside the gap between two words, never past the longest wait.
        silence = int(min(max(silence, self.confident_ms), longest))
        if self._tells_and_may_go_on(signals) and not told_in_full(signals):
            return self.habit.telling_ms(silence)  # a user known to think longer after a telling
        return silence

    def explain(self, signals: TurnSignals) -> str:
        """What the decision read, for the debug log: which of the rules' inputs held a turn, and how long."""
        act = speech_act(signals.transcript) if has_words(signals.transcript) else None
        return (
            f"{self.required_silence_ms(signals)} ms: {fused_completeness(signals).value}"
            f" {act.value if act else 'no words'}, told in full {told_in_full(signals)},"
            f" logprob {signals.end_of_turn_logprob}, answer {signals.answer and signals.answer.value},"
            f" agent asked {signals.agent_asked}, the user's longest pause {self.habit.longest_within_turns_ms():.0f} ms,"
            f" {signals.transcript!r}"
        )

    def longest_ms(self) -> int:
        """The longest silence any words ask for: after an unfinished sentence, or after a telling from a user
        known to think longer than that."""
        return self.habit.telling_ms(self._silence_ms[Completeness.INCOMPLETE])

    def _rules_silence_ms(self, signals: TurnSignals) -> int:
        """The rules' levels: a silence per kind of transcript (--turn-decision rules)."""
        silence = (
            self.confident_ms if signals_agree_it_is_over(signals) else self._silence_ms[fused_completeness(signals)]
        )
        if signals.answer is not None:
            return silence
        if self._tells_and_may_go_on(signals):
            # A statement complete by every signal hands the turn over; the habit holds only what is left open.
            if told_in_full(signals):
                return max(silence, self.told_ms)
            return max(silence, self.habit.telling_ms(self.telling_ms))
        no_hint = self._silence_ms[Completeness.UNKNOWN]
        if self.habit.longest_within_turns_ms() >= no_hint and speech_act(signals.transcript) is not SpeechAct.CLOSING:
            # A user who thought that long within a turn after a finished sentence may do so after a question
            # too: "Does anyone want to see Steve's feedback from there? ... from the specification?" (AMI,
            # 780 ms), which every signal but Smart Turn called over. A shorter pause is the rhythm between
            # sentences ("Sorry. Make that five people."); the answer to the agent's question is not held back, nor
            # a goodbye ("I don't think so, and that's it.").
            return max(silence, no_hint)
        return silence

    @staticmethod
    def _tells_and_may_go_on(signals: TurnSignals) -> bool:
        """A sentence that tells, unasked: real speakers go on after these (speech_act.py).

        Whisper's full stop or none: both came before the meetings' thinking
        pauses. A telling that ends in a time of day ("We arrive at 730.") is
        whole; one that ends in another number ("I live at 42.") is as likely
        an address or a number begun as a telling finished.
        """
        text = signals.transcript
        if signals.agent_asked or not has_words(text) or hands_over(speech_act(text)):
            return False
        return not _ends_in_a_time(text)

    def is_turn_over(self, silence_ms: float, signals: TurnSignals | str | None, turn_ms: float = 0.0) -> bool:
        if turn_ms >= self.max_turn_ms:
            return True
        return silence_ms >= self.required_silence_ms(signals)
