"""What the agent remembers of one conversation, and the prompt each answer is asked with.

The prompt is the system prompt, a window of the history, and the question.
The window is bounded three ways:

- by exchanges: at most ``history_turns`` (user, assistant) pairs, moving in
  steps (see :func:`recent_history`);
- by the agent's own answers: only the last ``answers_kept`` of them, when
  set; the user's words and tool calls stay (see :func:`older_answers_left_out`);
- by tokens: system prompt, window, question and the answer's
  ``answer_tokens`` must fit in ``context_tokens`` (``--llm-context``). Tokens
  are counted with the LLM's own tokenizer where the backend has one
  (llama.cpp), else over-estimated (:mod:`.llm.tokens`), plus
  ``MESSAGE_OVERHEAD_TOKENS`` per message for the chat template. While the
  count is over, the oldest exchanges go, in the same whole steps as the
  exchange bound, so the prompt's beginning stays the same as long as it can.
  A question too long to fit even with no history is cut to its last part
  (where a question usually is), after :data:`CUT_MARK`, which tells the
  model that its start is missing, with a warning in the log.

Between answers the system prompt and window go to the LLM's cache
(:meth:`LLMBackend.prefill`), and while the user speaks the words of each
partial transcript after them, so the next answer only evaluates the words
that came last.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence

from ..config import Settings
from ..engines.llm.base import Message, ToolCall
from ..engines.llm.tokens import estimate_tokens
from ..log import log_exception

log = logging.getLogger(__name__)

# Role markers and separators a chat template puts around each message: ChatML's take five tokens, Llama 3's
# six. The answer's own header counts as one more message.
MESSAGE_OVERHEAD_TOKENS = 8
CUT_MARK = "[The start of this message was cut: it was too long.] "

Count = Callable[[str], int]


def prompt_tokens(messages: list[Message], count: Count = estimate_tokens) -> int:
    """The tokens ``messages`` take in a prompt: their texts as ``count`` counts them, and the template's."""
    return sum(_message_tokens(m, count) for m in messages)


def _message_tokens(message: Message, count: Count) -> int:
    # An agent's tool calls are written into the prompt as JSON beside the content.
    calls = count(json.dumps(message["tool_calls"])) if "tool_calls" in message else 0
    return count(message.get("content") or "") + calls + MESSAGE_OVERHEAD_TOKENS


def last_part(text: str, tokens: int, count: Count) -> str:
    """The longest end of ``text`` that is at most ``tokens`` long."""
    low, high = 0, len(text)  # text[high:] fits; the search finds the smallest start that does
    while low < high:
        middle = (low + high) // 2
        if count(text[middle:]) <= tokens:
            high = middle
        else:
            low = middle + 1
    return text[high:]


class Conversation:
    def __init__(
        self,
        system_prompt: str,
        *,
        history_turns: int,
        context_tokens: int,
        answer_tokens: int,
        prefill: Callable[[list[Message]], Awaitable[None]],
        session_id: str = "",
        answers_kept: int | None = None,
        count_tokens: Count = estimate_tokens,
    ):
        self.system_prompt = system_prompt
        self._count = count_tokens
        self.history: list[Message] = []
        self._history_turns = history_turns
        self._answers_kept = answers_kept
        self._context_tokens = context_tokens
        self._answer_tokens = answer_tokens
        self._prefill = prefill
        self._prefilling: asyncio.Task | None = None
        self._id = session_id

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        prefill: Callable[[list[Message]], Awaitable[None]],
        session_id: str = "",
        count_tokens: Count = estimate_tokens,
    ) -> Conversation:
        return cls(
            settings.system_prompt,
            history_turns=settings.history_turns,
            context_tokens=settings.llm_context,
            answer_tokens=settings.llm_max_tokens,
            prefill=prefill,
            session_id=session_id,
            answers_kept=answers_kept(settings),
            count_tokens=count_tokens,
        )

    def prompt_prefix(self, question_tokens: int = 0, system_prompt: str | None = None) -> list[Message]:
        """The system prompt (this session's unless given) and the history a question of ``question_tokens`` follows."""
        system = [{"role": "system", "content": self.system_prompt if system_prompt is None else system_prompt}]
        budget = self._room() - question_tokens - self.tokens(system)
        window = recent_history(self.history, self._history_turns, budget, self._count)
        if self._answers_kept is not None:
            window = older_answers_left_out(window, self._answers_kept)
        return [*system, *window]

    def messages_for(self, text: str, system_prompt: str | None = None) -> list[Message]:
        """The whole prompt for the user's ``text``; with no text, the prompt for an answer nobody asked for."""
        if not text:
            return self.prompt_prefix(system_prompt=system_prompt)
        question = {"role": "user", "content": self._fit_question(text, warn=True)}
        return [*self.prompt_prefix(self.tokens([question]), system_prompt), question]

    def tokens(self, messages: list[Message]) -> int:
        """The tokens ``messages`` take in this conversation's prompts (the LLM's count, or an over-estimate)."""
        return prompt_tokens(messages, self._count)

    def _room(self) -> int:
        """The prompt's tokens: the context less the answer and the answer's header."""
        return self._context_tokens - self._answer_tokens - MESSAGE_OVERHEAD_TOKENS

    def agent_last_words(self) -> str | None:
        """What the agent said last (heard of it, if interrupted): the question a user may be answering."""
        return next((m["content"] for m in reversed(self.history) if m["role"] == "assistant"), None)

    def remember(
        self,
        user_text: str,
        heard: str,
        tool_messages: list[Message] | None = None,
        handed_off: Sequence[ToolCall] = (),
        results: Sequence[Message] = (),
    ) -> Message:
        """Add an exchange (``user_text`` empty: words nobody asked for, like a greeting), then prefill.

        ``tool_messages``: an agent's tool calls and their results in this answer, kept before what was heard.
        ``handed_off``: calls of the client's functions the answer made, and ``results``, their ``tool``
        messages (client_tools.py): the answer's message makes the calls, and they follow it.
        Returns the assistant's message, which a client may still cut to what it played (:meth:`truncate`).
        """
        if user_text:
            self.history.append({"role": "user", "content": self._fit_question(user_text, warn=False)})
        if tool_messages:
            self.history += tool_messages
        answer: Message = {"role": "assistant", "content": heard}
        if handed_off:  # null content, as OpenAI writes a message that only calls tools
            answer = {
                "role": "assistant",
                "content": heard or None,
                "tool_calls": [c.as_message_part() for c in handed_off],
            }
        self.history.append(answer)
        self.history += results
        self._prefill_soon()
        return answer

    def forget(self, message: Message) -> bool:
        """Take ``message`` (this very one) out of the history, with the results of the calls it made; False if
        it is not there."""
        if not any(m is message for m in self.history):
            return False
        calls = {call["id"] for call in message.get("tool_calls") or ()}
        self.history = [
            m for m in self.history if m is not message and not (m["role"] == "tool" and m.get("tool_call_id") in calls)
        ]
        self._prefill_soon()
        return True

    def truncate(self, answer: Message, heard: str) -> None:
        """Keep only ``heard`` of an answer in the history."""
        answer["content"] = heard
        self._prefill_soon()

    def prefill_question(self, words: str) -> None:
        """The user's ``words`` so far (a partial transcript) to the LLM's cache, after the prompt's
        beginning: the answer evaluates only what follows. Skipped while an earlier prefill runs."""
        self._prefill_soon(words)

    def _prefill_soon(self, words: str = "") -> None:
        if self._prefilling is None or self._prefilling.done():
            self._prefilling = asyncio.create_task(self._prefill_next_prompt(words))

    async def _prefill_next_prompt(self, words: str) -> None:
        question = {"role": "user", "content": self._fit_question(words, warn=False)}
        try:
            await self._prefill([*self.prompt_prefix(self.tokens([question])), question])
        except Exception:  # only a hint: the next answer evaluates it instead
            log_exception(log, "session %s: prefilling the LLM cache failed", self._id)

    def _fit_question(self, text: str, warn: bool) -> str:
        """``text``, or if it cannot fit in a prompt even with no history, its end after :data:`CUT_MARK`."""
        system = [{"role": "system", "content": self.system_prompt}]
        room = self._room() - self.tokens(system) - MESSAGE_OVERHEAD_TOKENS
        if self._count(text) <= room:
            return text
        kept = last_part(text, max(room - self._count(CUT_MARK), 0), self._count)
        if warn:
            log.warning(
                "session %s: a user message of %d characters does not fit the LLM context; keeping its last %d",
                self._id,
                len(text),
                len(kept),
            )
        return CUT_MARK + kept

    async def close(self) -> None:
        if self._prefilling is not None:
            self._prefilling.cancel()
            await asyncio.gather(self._prefilling, return_exceptions=True)


def recent_history(
    history: list[Message], turns: int, budget_tokens: int | None = None, count: Count = estimate_tokens
) -> list[Message]:
    """The last exchanges of ``history`` for the prompt.

    An exchange starts at a user message and runs to the next one: the answer,
    and an agent's tool calls and results, which are never split from it.
    At most ``turns`` exchanges, and at most ``budget_tokens`` (as ``count`` counts a text).
    The oldest kept exchange moves in steps of half the window, not one at a
    time: an LLM reuses its cache only for an unchanged prompt prefix, and a
    window sliding every turn changes the prefix right after the system prompt,
    so every answer would evaluate the whole history again (about 800 ms for
    eight exchanges with llama.cpp on 2 cores). Stepped, three answers in four
    find the history already evaluated, for keeping on average a quarter fewer
    exchanges. The token bound drops exchanges in the same steps.
    """
    starts = [i for i, message in enumerate(history) if message["role"] == "user"]
    exchanges = len(starts)
    if turns <= 0:
        return []
    step = max(1, turns // 2)
    # A greeting may stand alone before the first exchange: it goes with the first exchange dropped.
    dropped = 0 if exchanges <= turns else -(-(exchanges - turns) // step) * step  # rounded up to a whole step
    kept = history if dropped == 0 else history[starts[dropped] :] if dropped < exchanges else []
    while budget_tokens is not None and kept and prompt_tokens(kept, count) > budget_tokens:
        dropped = min(exchanges, dropped + step)
        kept = history[starts[dropped] :] if dropped < exchanges else []
    return kept


def answers_kept(settings: Settings) -> int | None:
    """``--history-answers``: how many of the agent's answers the prompt keeps; None for all."""
    if settings.history_answers >= 0:
        return settings.history_answers
    embedded = settings.llm == "llamacpp" and not settings.llm_model
    return 0 if embedded else None


def older_answers_left_out(window: list[Message], kept: int) -> list[Message]:
    """``window`` without the agent's answers but its last ``kept``.

    An answer is an assistant message without tool calls: a tool call stays
    with its result, which a chat template will not take alone. The prompt
    stays a prefix of the next one but for the answer that drops out, which
    the next prefill evaluates from, before the user speaks again.
    """
    answers = [
        i for i, message in enumerate(window) if message["role"] == "assistant" and not message.get("tool_calls")
    ]
    dropped = set(answers[: max(0, len(answers) - kept)])
    return [message for i, message in enumerate(window) if i not in dropped]
