"""Answers across turns: how often the embedded LLM copies an answer it gave before in the conversation.

Each scripted conversation of ``conversations.json`` is played turn by turn
in process, through the reply path of ``voice-agent bench answers``, with
the prompt a session builds (``Conversation``: system prompt, history
window, question) and each spoken answer remembered as a session remembers
it. It runs once for each ``--history-answers`` value (how many of the
agent's own answers the prompt keeps; ``all`` for every one), each with the
same seeds. Per value the report gives the answers whose first sentence is
a near copy of an earlier answer's in the same conversation (half or more
of its distinct words shared), the exact copies, and the mean length.
Writes ``conversations.json`` and ``conversations.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

from ..agent.conversation import Conversation
from ..config import Settings
from ..reply.repetition import spoken_words
from ..turn_taking.speech_act import sentences
from .answers import AnswerSetting, answer_one, load_backend, takes_server_options, write_report

CONVERSATIONS_FILE = "conversations.json"
NEAR_COPY = 0.5  # shared share of distinct words (Jaccard) of two first sentences


def first_sentence_words(text: str) -> set[str]:
    said = sentences(text)
    return set(spoken_words(said[0])) if said else set()


def copies_of(earlier: list[str], answer: str) -> tuple[bool, bool]:
    """(near copy, exact copy): whether ``answer``'s first sentence repeats that of one of ``earlier``."""
    words = first_sentence_words(answer)
    if not words:
        return False, False
    firsts = [first_sentence_words(text) for text in earlier]
    near = any(len(words & other) / len(words | other) >= NEAR_COPY for other in firsts if other)
    return near, any(words == other for other in firsts)


async def play(llm: Any, setting: AnswerSetting, turns: list[str], kept: int | None, seed: int) -> list[dict]:
    settings = Settings()

    async def no_prefill(messages: list) -> None:
        pass

    conversation = Conversation(
        setting.system_prompt,
        history_turns=settings.history_turns,
        context_tokens=settings.llm_context,
        answer_tokens=settings.llm_max_tokens,
        prefill=no_prefill,
        answers_kept=kept,
    )
    answered: list[dict] = []
    for index, question in enumerate(turns):
        llm.seed = seed + index
        answer = await answer_one(llm, setting, question, settings, conversation.messages_for(question))
        near, exact = copies_of([a["spoken"] for a in answered], answer["spoken"])
        answered.append({**answer, "near_copy": near, "exact_copy": exact})
        conversation.remember(question, answer["spoken"])
    await conversation.close()
    return answered


def summarize(answers: list[dict]) -> dict:
    count = len(answers)
    return {
        "answers": count,
        "near_copies": sum(a["near_copy"] for a in answers),
        "exact_copies": sum(a["exact_copy"] for a in answers),
        "mean_words": round(sum(a["words"] for a in answers) / count, 1) if count else 0.0,
        "empty": sum(a["empty"] for a in answers),
    }


def parse_kept(values: str) -> list[int | None]:
    return [None if value.strip() == "all" else int(value) for value in values.split(",") if value.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--history-answers",
        default="all,1,0",
        help="Comma-separated values to compare: how many of its answers the prompt keeps, or all.",
    )
    parser.add_argument("--conversations", type=int, default=None, help="Play only the first N conversations.")
    parser.add_argument("--out", default="artifacts/conversations", help="Folder for the report.")
    parser.add_argument("--llm-model", default="", help="GGUF path; empty means the embedded SmolLM2.")


def run(args: argparse.Namespace) -> int:
    if takes_server_options(args):
        return 2
    data = json.loads(resources.files(__package__).joinpath(CONVERSATIONS_FILE).read_text(encoding="utf-8"))
    conversations = data["conversations"][: args.conversations]
    report = asyncio.run(_run(args, parse_kept(args.history_answers), conversations))
    write_report(Path(args.out), "conversations", report, markdown_table(report["results"]))
    return 0


def markdown_table(results: list[dict]) -> str:
    lines = [
        "| answers kept | answers | near copies | exact copies | words mean | empty |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        s = result["summary"]
        lines.append(
            f"| {result['kept']} | {s['answers']} | {s['near_copies']} | {s['exact_copies']} "
            f"| {s['mean_words']} | {s['empty']} |"
        )
    return "\n".join(lines) + "\n"


async def _run(args: argparse.Namespace, kept_values: list[int | None], conversations: list[dict]) -> dict:
    started = time.perf_counter()
    setting = AnswerSetting.from_settings("defaults", Settings())
    llm = await load_backend(setting, args.llm_model)
    results = []
    try:
        for kept in kept_values:
            answered = []
            for number, conversation in enumerate(conversations):
                answered += await play(llm, setting, conversation["turns"], kept, seed=1000 * (number + 1))
                print(f"answers kept {kept if kept is not None else 'all'}: {conversation['name']}", file=sys.stderr)
            results.append(
                {"kept": "all" if kept is None else kept, "summary": summarize(answered), "answers": answered}
            )
    finally:
        await llm.close()
    return {
        "eval": "conversations",
        "conversations": len(conversations),
        "model": llm.model_path,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "seconds": round(time.perf_counter() - started, 1),
        "results": results,
    }
