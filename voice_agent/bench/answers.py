"""Answer quality of the embedded LLM: loops, length, unspeakable text, echoes, first-chunk latency.

Each question of ``answers_questions.json`` is answered in process by the
embedded llama.cpp model (loaded once) through the reply path a session uses:
LLM stream → loop guard → chunker with the sentence limit → speakable text →
what TTS gets. TTS itself is a recorder (Piper's sound is not judged here, and
would only add CPU time); the pacer still runs. Per setting the report gives:

- loops: the longest run of one word and the share of repeated word trigrams;
- length in words and sentences;
- unspeakable characters reaching TTS (and, for comparison, in the raw LLM text);
- answers that echo the user's words, and empty ones (nothing speakable: the
  reply says ``NOTHING_TO_SAY`` instead of staying silent);
- the first-chunk latency (from the request to the first chunk handed to TTS).

``--grid`` runs the candidate settings the defaults were chosen from
(docs/answers.md); ``--settings`` picks some by name. Writes ``answers.json``
and ``answers.md`` into ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..config import DEFAULT_SYSTEM_PROMPT, SPOKEN_ANSWER_RULES, Settings
from ..engines.llm.base import Message
from ..engines.speakable import speakable, unspeakable
from ..reply.pipeline import NOTHING_TO_SAY, Reply
from ..reply.repetition import longest_word_run, repeated_trigram_share, spoken_words

QUESTIONS_FILE = "answers_questions.json"
RATE = 16000

# The quality bar the defaults must meet (docs/answers.md).
MAX_WORD_RUN = 2  # a run of 3 is a loop
MAX_TRIGRAM_SHARE = 0.15  # per answer, below this
LONG_ANSWER_WORDS = 40
MAX_LONG_SHARE = 0.05
MAX_ECHO_SHARE = 0.05
ECHO_SHARE = 0.8  # of the user's words, said back in order
ECHO_OWN_WORDS = 1  # an echo adds at most this many words
PROMPT_COPY_WORDS = 6

# The ``before`` setting, the baseline the defaults are compared with: a plain prompt and sampling, no sentence limit
# (docs/results/answers.md).
BEFORE_PROMPT = (
    "You are a friendly voice assistant in a spoken conversation. "
    "Answer in one or two short sentences of plain spoken English. "
    "Never use lists, markdown, emojis or code."
)
EXAMPLES_PROMPT = (
    SPOKEN_ANSWER_RULES + "\n\nExamples of good answers:\n"
    "Caller: How do I get to the station?\nYou: Take the number five bus from the main square, it takes ten minutes.\n"
    "Caller: Tell me a joke.\nYou: Why don't eggs tell jokes? They would crack each other up.\n"
    "Caller: I'd like a table for two at eight.\nYou: Of course. What name should I put the booking under?\n"
    "Caller: List ten fruits.\nYou: Apples, bananas, oranges and grapes are a good start."
)
SHORT_EXAMPLES_PROMPT = (
    SPOKEN_ANSWER_RULES + "\n\nExamples of good answers:\n"
    "Caller: How do I get to the station?\nYou: Take the number five bus from the main square, it takes ten minutes.\n"
    "Caller: I'd like a table for two at eight.\nYou: Of course. What name should I put the booking under?"
)
PROMPTS = {
    "default": DEFAULT_SYSTEM_PROMPT,
    "before": BEFORE_PROMPT,
    "rules": SPOKEN_ANSWER_RULES,
    "examples": EXAMPLES_PROMPT,
    "short-examples": SHORT_EXAMPLES_PROMPT,
}

# (prompt, temperature, repeat, frequency and presence penalties), each with the default sentence limit.
GRID = [
    ("before", 0.3, 1.0, 0.0, 0.0),
    ("rules", 0.3, 1.0, 0.0, 0.0),
    ("examples", 0.3, 1.0, 0.0, 0.0),
    ("short-examples", 0.3, 1.0, 0.0, 0.0),
    ("default", 0.3, 1.0, 0.0, 0.0),
    ("default", 0.3, 1.1, 0.0, 0.0),
    ("default", 0.3, 1.2, 0.0, 0.0),
    ("default", 0.3, 1.0, 0.5, 0.0),
    ("default", 0.3, 1.0, 0.0, 0.5),
    ("default", 0.0, 1.0, 0.0, 0.0),
    ("default", 0.6, 1.0, 0.0, 0.0),
    ("default", 0.3, 1.1, 0.5, 0.0),
]


@dataclass(frozen=True)
class AnswerSetting:
    name: str
    temperature: float
    repeat_penalty: float
    frequency_penalty: float
    presence_penalty: float
    max_sentences: int
    system_prompt: str

    @classmethod
    def from_settings(cls, name: str, settings: Settings) -> AnswerSetting:
        return cls(
            name,
            settings.llm_temperature,
            settings.llm_repeat_penalty,
            settings.llm_frequency_penalty,
            settings.llm_presence_penalty,
            settings.answer_max_sentences,
            settings.system_prompt,
        )


def candidate_settings() -> dict[str, AnswerSetting]:
    """The defaults, the settings before this work, and the grid the defaults were chosen from."""
    defaults = AnswerSetting.from_settings("defaults", Settings())
    before = AnswerSetting("before", 0.3, 1.0, 0.0, 0.0, 0, BEFORE_PROMPT)
    grid = [
        dataclasses.replace(
            defaults,
            name=f"{prompt}-t{temperature}-rep{repeat}-freq{frequency}-pres{presence}",
            system_prompt=PROMPTS[prompt],
            temperature=temperature,
            repeat_penalty=repeat,
            frequency_penalty=frequency,
            presence_penalty=presence,
        )
        for prompt, temperature, repeat, frequency, presence in GRID
    ]
    return {setting.name: setting for setting in [defaults, before, *grid]}


# One answer's measures.


_SENTENCE_END = re.compile(r"[.!?…]+(?:\s|$)")


def sentence_count(text: str) -> int:
    return sum(1 for part in _SENTENCE_END.split(text) if spoken_words(part))


def echoes(question: str, answer: str) -> bool:
    """The answer says the user's words back and nothing of its own.

    One of its sentences holds 80 % of the user's words (at least 4) in order
    and at most one word of its own: "The bus goes to the museum." for "Which
    bus goes to the museum?". A sentence that starts with yes or no answers
    ("No, the office is not closed on public holidays."), and one that adds
    words says something ("The boiling point of water is 100 degrees Celsius.").
    """
    asked = spoken_words(question)
    if len(asked) < 4:
        return False
    for sentence in _SENTENCE_END.split(answer):
        said = spoken_words(sentence)
        own = [word for word in said if word not in asked]
        answers_yes_or_no = bool(said) and said[0] in ("yes", "no")
        if (
            not answers_yes_or_no
            and len(own) <= ECHO_OWN_WORDS
            and _common_in_order(asked, said) >= ECHO_SHARE * len(asked)
        ):
            return True
    return False


def copies_prompt(system_prompt: str, answer: str) -> bool:
    """The answer repeats a run of ``PROMPT_COPY_WORDS`` words of the system prompt (an example, a rule)."""
    prompt = spoken_words(system_prompt)
    runs = {tuple(prompt[i : i + PROMPT_COPY_WORDS]) for i in range(len(prompt) - PROMPT_COPY_WORDS + 1)}
    said = spoken_words(answer)
    return any(tuple(said[i : i + PROMPT_COPY_WORDS]) in runs for i in range(len(said) - PROMPT_COPY_WORDS + 1))


def _common_in_order(a: list[str], b: list[str]) -> int:
    """The length of the longest common subsequence of two word lists."""
    previous = [0] * (len(b) + 1)
    for word in a:
        current = [0]
        for j, other in enumerate(b, 1):
            current.append(previous[j - 1] + 1 if word == other else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def measure(
    question: str,
    raw: str,
    spoken: str,
    first_chunk_ms: float | None,
    cut_by: str | None,
    llm_ttft_ms: float | None,
    system_prompt: str = "",
) -> dict:
    words = spoken_words(spoken)
    return {
        "question": question,
        "raw": raw,
        "spoken": spoken,
        "words": len(words),
        "sentences": sentence_count(spoken),
        "longest_word_run": longest_word_run(words),
        "repeated_trigram_share": round(repeated_trigram_share(words), 3),
        "unspeakable_tts": len(unspeakable(spoken)),
        "unspeakable_raw": len(unspeakable(raw)),
        "echo": echoes(question, spoken),
        "copies_prompt": copies_prompt(system_prompt, spoken),
        "empty": not words or spoken == NOTHING_TO_SAY,
        "first_chunk_ms": None if first_chunk_ms is None else round(first_chunk_ms, 1),
        "llm_ttft_ms": None if llm_ttft_ms is None else round(llm_ttft_ms, 1),
        "cut_by": cut_by,
    }


def summarize(answers: list[dict]) -> dict:
    count = len(answers)
    latencies = sorted(a["first_chunk_ms"] for a in answers if a["first_chunk_ms"] is not None)
    ttfts = [a["llm_ttft_ms"] for a in answers if a["llm_ttft_ms"] is not None]
    summary = {
        "answers": count,
        "max_word_run": max(a["longest_word_run"] for a in answers),
        "max_repeated_trigram_share": max(a["repeated_trigram_share"] for a in answers),
        "looping_answers": sum(_loops(a) for a in answers),
        "mean_words": round(statistics.fmean(a["words"] for a in answers), 1),
        "max_words": max(a["words"] for a in answers),
        "long_share": round(sum(a["words"] > LONG_ANSWER_WORDS for a in answers) / count, 3),
        "mean_sentences": round(statistics.fmean(a["sentences"] for a in answers), 2),
        "unspeakable_tts": sum(a["unspeakable_tts"] for a in answers),
        "unspeakable_raw": sum(a["unspeakable_raw"] for a in answers),
        "echo_share": round(sum(a["echo"] for a in answers) / count, 3),
        "copies_prompt_share": round(sum(a["copies_prompt"] for a in answers) / count, 3),
        "empty": sum(a["empty"] for a in answers),
        "first_chunk_ms_median": round(statistics.median(latencies), 1) if latencies else None,
        "first_chunk_ms_p95": round(_percentile(latencies, 95), 1) if latencies else None,
        "llm_ttft_ms_median": round(statistics.median(ttfts), 1) if ttfts else None,
        "cut_by": {
            reason: sum(a["cut_by"] == reason for a in answers)
            for reason in ("loop", "repeated_chunk", "sentence_limit")
        },
    }
    summary["bar"] = {
        "no_loops": summary["looping_answers"] == 0,
        "long_share": summary["long_share"] <= MAX_LONG_SHARE,
        "no_unspeakable": summary["unspeakable_tts"] == 0,
        "echo_share": summary["echo_share"] <= MAX_ECHO_SHARE,
    }
    summary["passes"] = all(summary["bar"].values())
    return summary


def _loops(answer: dict) -> bool:
    return answer["longest_word_run"] > MAX_WORD_RUN or answer["repeated_trigram_share"] >= MAX_TRIGRAM_SHARE


def _percentile(values: list[float], percent: float) -> float:
    return float(np.percentile(values, percent, method="nearest"))


# Running the reply path.


class _RecordingLLM:
    """The real backend, with what it wrote recorded."""

    def __init__(self, llm: Any):
        self._llm = llm
        self.text = ""

    async def stream_chat(self, messages: list[Message]):
        stream = self._llm.stream_chat(messages)
        try:
            async for delta in stream:
                self.text += delta
                yield delta
        finally:
            await stream.aclose()


class _RecordingTTS:
    """What Piper would be given: PiperTTS.synthesize speaks ``speakable(text)``."""

    sample_rate = RATE

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def synthesize(self, text: str):
        text = speakable(text)
        if text:
            self.texts.append(text)
            yield np.zeros(RATE // 50, dtype=np.float32)  # one frame: the pacer has something to send


async def answer_one(
    llm: Any, setting: AnswerSetting, question: str, settings: Settings, messages: list[Message] | None = None
) -> dict:
    """``question`` answered through the reply path; ``messages``: the whole prompt, when not the question alone."""
    recorder, tts = _RecordingLLM(llm), _RecordingTTS()
    if messages is None:
        messages = [{"role": "system", "content": setting.system_prompt}, {"role": "user", "content": question}]
    reply = Reply(
        llm=recorder,  # type: ignore[arg-type]  # a Reply only streams from its LLM
        tts=tts,  # type: ignore[arg-type]  # and only synthesizes with its TTS
        messages=messages,
        output_rate=RATE,
        lead_s=settings.output_lead_ms / 1000.0,
        emit=lambda event: None,
        turn=1,
        user_text=question,
        first_chunk_min_words=settings.first_chunk_min_words,
        phrase_breaks=settings.first_chunk_phrase_breaks,
        max_sentences=setting.max_sentences,
    )
    await reply.run()
    timings = reply.timings
    spoken = " ".join(tts.texts)
    return measure(
        question,
        recorder.text,
        spoken,
        timings.first_chunk_ms,
        reply.cut_by,
        timings.llm_ttft_ms,
        setting.system_prompt,
    )


async def load_backend(setting: AnswerSetting, llm_model: str) -> Any:
    """An embedded llama.cpp backend for ``setting``, its system prompt evaluated as the server's warm-up does."""
    from ..engines.loader import create_llm

    settings = Settings(llm_model=llm_model, llm_instances=1, system_prompt=setting.system_prompt)
    llm: Any = create_llm(settings)
    llm.temperature = setting.temperature
    llm.repeat_penalty = setting.repeat_penalty
    llm.frequency_penalty = setting.frequency_penalty
    llm.presence_penalty = setting.presence_penalty
    await llm.warm_up()
    return llm


def load_questions(path: str | None, limit: int | None) -> list[str]:
    if path:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    else:
        data = json.loads(resources.files(__package__).joinpath(QUESTIONS_FILE).read_text(encoding="utf-8"))
    questions = [q["text"] for q in data["questions"]]
    return questions[:limit] if limit else questions


def markdown_table(results: list[dict]) -> str:
    header = (
        "| setting | word run max | trigram share max | looping | words mean / max | > 40 words | sentences mean "
        "| unspeakable TTS (raw) | echo | copies prompt | empty | cut: loop / repeat / limit | first chunk ms p50 / p95 | bar |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for result in results:
        s, cut = result["summary"], result["summary"]["cut_by"]
        rows.append(
            f"| {result['setting']['name']} | {s['max_word_run']} | {s['max_repeated_trigram_share']:.2f} "
            f"| {s['looping_answers']} | {s['mean_words']} / {s['max_words']} | {s['long_share']:.0%} "
            f"| {s['mean_sentences']} | {s['unspeakable_tts']} ({s['unspeakable_raw']}) | {s['echo_share']:.0%} | {s['copies_prompt_share']:.0%} "
            f"| {s['empty']} | {cut['loop']} / {cut['repeated_chunk']} / {cut['sentence_limit']} "
            f"| {s['first_chunk_ms_median']} / {s['first_chunk_ms_p95']} | {'pass' if s['passes'] else 'FAIL'} |"
        )
    return header + "\n".join(rows) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--questions", type=int, default=None, help="Ask only the first N questions.")
    parser.add_argument("--questions-file", default=None, help=f"A question set like the bundled {QUESTIONS_FILE}.")
    parser.add_argument(
        "--settings",
        default="defaults",
        help="Comma-separated setting names to run (defaults, before, or a grid name; see --list).",
    )
    parser.add_argument("--grid", action="store_true", help="Run every candidate setting.")
    parser.add_argument("--list", action="store_true", help="List the candidate settings and exit.")
    parser.add_argument("--check", action="store_true", help="Exit 1 when a setting misses the bar.")
    parser.add_argument("--out", default="artifacts/answers", help="Folder for answers.json and answers.md.")
    parser.add_argument("--llm-model", default="", help="GGUF path; empty means the embedded SmolLM2.")


def write_report(out: Path, name: str, report: dict, table: str) -> None:
    """``NAME.json`` and ``NAME.md`` into ``out``; the table printed, and where the report is."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / f"{name}.md").write_text(table, encoding="utf-8")
    print(table)
    print(f"report: {out / f'{name}.json'}")


def takes_server_options(args: argparse.Namespace) -> bool:
    """Whether ``args`` hold options for a server, which an eval that runs the model in process refuses."""
    if getattr(args, "serve_args", None):
        print(f"unknown options {args.serve_args}: this eval runs the model in process, not a server", file=sys.stderr)
        return True
    return False


def run(args: argparse.Namespace) -> int:
    if takes_server_options(args):
        return 2
    candidates = candidate_settings()
    if args.list:
        for name, setting in candidates.items():
            print(name, {k: v for k, v in dataclasses.asdict(setting).items() if k not in ("name", "system_prompt")})
        return 0
    names = list(candidates) if args.grid else [name.strip() for name in args.settings.split(",") if name.strip()]
    unknown = [name for name in names if name not in candidates]
    if unknown:
        print(f"unknown settings {unknown}; see --list", file=sys.stderr)
        return 2
    questions = load_questions(args.questions_file, args.questions)
    report = asyncio.run(_run(args, [candidates[name] for name in names], questions))
    write_report(Path(args.out), "answers", report, markdown_table(report["results"]))
    missed = [result["setting"]["name"] for result in report["results"] if not result["summary"]["passes"]]
    if args.check and missed:
        print(f"missed the bar: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


async def _run(args: argparse.Namespace, settings_to_run: list[AnswerSetting], questions: list[str]) -> dict:
    started = time.perf_counter()
    # One backend per setting, each keeping its own system prompt in its cache, and
    # every question asked under each setting in turn: the machine's load, which
    # varies from minute to minute, then weighs on every setting alike.
    backends = [await load_backend(setting, args.llm_model) for setting in settings_to_run]
    answers: list[list[dict]] = [[] for _ in settings_to_run]
    settings = Settings()
    try:
        for index, question in enumerate(questions):
            for setting, llm, answered in zip(settings_to_run, backends, answers, strict=True):
                llm.seed = 1000 + index  # the same draw for a question under every setting
                answered.append(await answer_one(llm, setting, question, settings))
            print(f"{index + 1}/{len(questions)} {question}", file=sys.stderr)
    finally:
        for llm in backends:
            await llm.close()
    results = [
        {"setting": dataclasses.asdict(setting), "summary": summarize(answered), "answers": answered}
        for setting, answered in zip(settings_to_run, answers, strict=True)
    ]
    return {
        "eval": "answers",
        "questions": len(questions),
        "model": backends[0].model_path,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "seconds": round(time.perf_counter() - started, 1),
        "results": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m voice_agent.bench.answers", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
