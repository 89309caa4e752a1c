"""Rewrite one chunk of an LLM answer into text a voice can say.

Piper reads text through espeak-ng, which spells out what a small LLM writes
for a screen: "*" is "asterisk", "#" "hash", "/" "slash", "~" "tilde", an
emoji its name ("grinning face"), "$5" "dollar five", "9-5" "nine dash five",
a URL "h t t p s colon slash slash ...". So before TTS:

- markdown is dropped (emphasis, headings, code fences and backticks, link
  targets, table bars, quote marks), and list bullets and numbers are dropped;
- arithmetic and symbols become words: "3 hours * 60" is "3 hours times 60",
  "50°F" "50 degrees Fahrenheit", "$5" "5 dollars", "9-5" "9 to 5",
  "Mon-Fri" "Monday to Friday", "~5" "about 5", "#2" "number 2";
- a line of code is dropped ("def sort_list(lst):", "x = sorted(y)");
- a URL is said as its host ("example.com", which espeak reads "example dot
  com"); emoji and other symbols are dropped.

What is left holds no character :func:`unspeakable` finds. The function is
idempotent: the reply applies it to each chunk, and Piper's wrapper again.
"""

from __future__ import annotations

import re
import unicodedata

# Symbols espeak-ng reads out by name, or markup: never meant to be heard.
MARKUP = frozenset("*#/\\~_|<>^[]{}`")
# Symbols espeak says as the word they stand for.
SPOKEN_SYMBOLS = frozenset("%&@+=")

_FENCE = re.compile(r"```\w*")
# A line of code, as a model writes it when asked for some: dropped whole. Only
# forms English does not take, so no sentence is mistaken for one.
_CODE_LINE = re.compile(
    r"^\s*(?:(?:def|class)\s+\w+\s*[(:]|(?:from\s+[\w.]+\s+)?import\s+[\w.]+\s*$|return\s+\S*[(\[]|"
    r"(?:print|console\.log)\s*\(|(?:const|let|var)\s+\w+\s*=|[a-z_]\w*(?:\.\w+)*\s*[-+*/]?=\s*\S)"
)
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_URL = re.compile(r"\b(?:https?://|www\.)[^\s<>\"')\]]+", re.IGNORECASE)
_HTML_TAG = re.compile(r"</?[a-zA-Z][^<>]*>")
_BULLET = re.compile(r"^\s*(?:(?:[-*•‣▪●◦+>]|\d{1,2}[.)])\s+)+")
_HEADING = re.compile(r"^\s*#+\s+")
_INLINE_BULLET = re.compile(r"\s+[-•‣▪●◦]\s+")
_RULE = re.compile(r"-{3,}|={3,}")  # a horizontal rule, a table's header line

_TIME = r"\d{1,2}(?::\d\d)?\s?(?:[ap]\.?m\.?)?"
# A hyphen with spaces around it is a minus or a pause, not a range.
_TIME_RANGE = re.compile(rf"\b({_TIME})(?:-|\s?–\s?)({_TIME})(?![\w-])", re.IGNORECASE)
_DAYS = {
    "mon": "Monday",
    "tue": "Tuesday",
    "tues": "Tuesday",
    "wed": "Wednesday",
    "thu": "Thursday",
    "thur": "Thursday",
    "thurs": "Thursday",
    "fri": "Friday",
    "sat": "Saturday",
    "sun": "Sunday",
}
_DAY = "|".join(_DAYS)
_DAY_RANGE = re.compile(rf"\b({_DAY})(?:[a-z]*day)?\.?\s?[-–]\s?({_DAY})(?:[a-z]*day)?\b", re.IGNORECASE)

_TIMES = re.compile(r"(?<=[\w)])\s*[*×]\s*(?=\d)|(?<=\d)\s*[*×]\s*(?=[\w(])|(?<=\d)\s+x\s+(?=\d)")
_DIVIDED = re.compile(r"(?<=\d)\s*÷\s*(?=\d)|(?<=\d)\s+/\s+(?=\d)")
_MINUS = re.compile(r"(?<=\d)\s+[-−]\s+(?=\d)")
_LESS = re.compile(r"(?<=[\w)])\s*<\s*(?=\d)")
_MORE = re.compile(r"(?<=[\w)])\s*>\s*(?=\d)")
_FRACTIONS = {"1/2": "a half", "1/3": "a third", "2/3": "two thirds", "1/4": "a quarter", "3/4": "three quarters"}
_FRACTION = re.compile(r"(?<![\d/])(1/2|1/3|2/3|1/4|3/4)(?![\d/])")
_SLASHED_NUMBERS = re.compile(r"(?<=\d)/(?=\d)")
_SLASHED_WORDS = re.compile(r"(?<=[^\W\d_])/(?=[^\W\d_])")
_CURRENCY = re.compile(r"([$€£])\s?(\d[\d,]*)(?:\.(\d\d))?\b")
_CURRENCY_NAMES = {"$": ("dollar", "dollars"), "€": ("euro", "euros"), "£": ("pound", "pounds")}
_DEGREES = re.compile(r"\s?°\s?([CF])\b|\s?°")
_ABOUT = re.compile(r"~\s?(?=\d)")
_NUMBER_SIGN = re.compile(r"#\s?(?=\d)")
_WORDS_FOR = {"→": " to ", "->": " to ", "=>": " to ", "±": " plus or minus ", "≈": " about "}
_WORDS_FOR_PATTERN = re.compile("|".join(re.escape(symbol) for symbol in _WORDS_FOR))

_SPACE_BEFORE_PUNCTUATION = re.compile(r"\s+([,.;:!?])")
_REPEATED_PUNCTUATION = re.compile(r"([,;:])(?:\s*[,;:])+")
_COMMA_BEFORE_END = re.compile(r"[,;:]\s*([.!?])")
_LEADING_PUNCTUATION = re.compile(r"^[\s,;:.!?)\]]+")


def unspeakable(text: str) -> list[str]:
    """The characters of ``text`` a voice would spell out or misread: markup, emoji and other symbols."""
    return [char for char in text if _unspeakable(char)]


def _unspeakable(char: str) -> bool:
    if char in MARKUP:
        return True
    if char in SPOKEN_SYMBOLS or char.isspace():
        return False
    category = unicodedata.category(char)
    return category[0] == "S" or category in ("Cc", "Cf", "Co", "Cs", "Cn", "Me") or char in "\ufe0e\ufe0f"


def speakable(text: str) -> str:
    if _CODE_LINE.match(text):
        return ""
    text = _FENCE.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _URL.sub(_host, text)
    text = _HTML_TAG.sub(" ", text)
    text = _HEADING.sub("", text)
    text = _BULLET.sub("", text)
    text = _words_for_symbols(text)
    text = _INLINE_BULLET.sub(", ", text)
    text = _RULE.sub(" ", text)
    text = text.strip().strip("|").replace("|", ",")  # a table row: its cells
    text = "".join(" " if _unspeakable(char) else char for char in text)
    return _tidy(text)


def _words_for_symbols(text: str) -> str:
    text = _DAY_RANGE.sub(lambda m: f"{_DAYS[m[1].lower()]} to {_DAYS[m[2].lower()]}", text)
    text = _TIME_RANGE.sub(r"\1 to \2", text)
    text = _CURRENCY.sub(_money, text)
    text = _DEGREES.sub(_degrees, text)
    text = _TIMES.sub(" times ", text)
    text = _DIVIDED.sub(" divided by ", text)
    text = _MINUS.sub(" minus ", text)
    text = _LESS.sub(" less than ", text)
    text = _MORE.sub(" more than ", text)
    text = text.replace("24/7", "24 7").replace("and/or", "and or")
    text = _FRACTION.sub(lambda m: _FRACTIONS[m[1]], text)
    text = _SLASHED_NUMBERS.sub(" over ", text)
    text = _SLASHED_WORDS.sub(" or ", text)
    text = _ABOUT.sub("about ", text)
    text = _NUMBER_SIGN.sub("number ", text)
    return _WORDS_FOR_PATTERN.sub(lambda m: _WORDS_FOR[m[0]], text)


def _host(match: re.Match[str]) -> str:
    url = match[0]
    trailing = len(url) - len(url.rstrip(".,;:!?"))
    host = re.sub(r"^(?:https?://)?(?:www\.)?", "", url[: len(url) - trailing], flags=re.IGNORECASE)
    return host.split("/")[0] + url[len(url) - trailing :]


def _money(match: re.Match[str]) -> str:
    symbol, whole, cents = match[1], match[2], match[3]
    one, many = _CURRENCY_NAMES[symbol]
    said = f"{whole} {one if whole == '1' else many}"
    return f"{said} {cents}" if cents and cents != "00" else said


def _degrees(match: re.Match[str]) -> str:
    scale = {"C": " Celsius", "F": " Fahrenheit"}.get(match[1] or "", "")
    return f" degrees{scale}"


def _tidy(text: str) -> str:
    text = " ".join(text.split())
    text = _SPACE_BEFORE_PUNCTUATION.sub(r"\1", text)
    text = _REPEATED_PUNCTUATION.sub(r"\1", text)
    text = _COMMA_BEFORE_END.sub(r"\1", text)
    text = _LEADING_PUNCTUATION.sub("", text)
    return text
