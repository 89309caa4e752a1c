"""The conversation: history, the prompt window (by exchanges and by tokens), prefill."""

from __future__ import annotations

import asyncio
import logging

from voice_agent.agent.conversation import (
    CUT_MARK,
    MESSAGE_OVERHEAD_TOKENS,
    Conversation,
    answers_kept,
    older_answers_left_out,
    prompt_tokens,
    recent_history,
)
from voice_agent.engines.llm.tokens import estimate_tokens


class Prefills:
    def __init__(self):
        self.calls: list[list[dict]] = []

    async def __call__(self, messages):
        self.calls.append(messages)


def conversation(turns=8, context=2048, answer=120, prefill=None) -> Conversation:
    return Conversation(
        "Be brief.", history_turns=turns, context_tokens=context, answer_tokens=answer, prefill=prefill or Prefills()
    )


def test_the_history_window_moves_in_steps_so_the_prompt_prefix_stays_cached():
    greeting = [{"role": "assistant", "content": "Hi."}]
    history = list(greeting)
    firsts = []
    for n in range(1, 21):
        history += [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]
        kept = recent_history(history, 8)
        exchanges = sum(m["role"] == "user" for m in kept)
        assert exchanges <= 8 and (exchanges >= 5 or n < 5)
        assert kept[-1]["content"] == f"a{n}" and (n <= 8 or kept[0]["role"] == "user")
        firsts.append(kept[0]["content"])
    assert firsts[:8] == ["Hi."] * 8  # everything while it fits
    # Then the oldest kept exchange moves every fourth turn, not every turn.
    assert firsts[8:] == ["q5"] * 4 + ["q9"] * 4 + ["q13"] * 4
    assert recent_history(history, 0) == []
    assert recent_history(history, 1) == history[-2:]


def test_without_a_tokenizer_tokens_are_over_estimated_plus_the_template():
    assert prompt_tokens([{"role": "user", "content": "x" * 9}]) == 3 + MESSAGE_OVERHEAD_TOKENS
    assert prompt_tokens([]) == 0
    assert estimate_tokens("Hello there") == 4  # letters and spaces at three a token
    assert estimate_tokens("19:30, 4.") == 9  # digits and punctuation at one each
    assert estimate_tokens("\U00020000" * 10) == 40  # a character outside the vocabulary's merges: a token a byte


def test_the_token_bound_drops_the_oldest_exchanges_in_whole_steps():
    history = [{"role": "assistant", "content": "Hi."}]
    for n in range(1, 7):
        history += [{"role": "user", "content": f"q{n} " + "x" * 396}, {"role": "assistant", "content": f"a{n}"}]
    each = prompt_tokens(history[1:3])  # 100 + 4 + 1 + 4
    assert recent_history(history, 8, budget_tokens=10_000) == history  # under both bounds: everything
    # Eight exchanges at most: steps of four. Four exchanges would fit, but the window moves a whole step.
    assert recent_history(history, 8, budget_tokens=4 * each) == history[-4:]
    assert recent_history(history, 4, budget_tokens=4 * each) == history[-8:]  # steps of two
    assert recent_history(history, 4, budget_tokens=4 * each - 1) == history[-4:]
    assert recent_history(history, 8, budget_tokens=each - 1) == []  # not even one exchange fits


async def test_a_long_typed_conversation_stays_inside_the_context():
    c = conversation(context=1024, answer=120)
    for n in range(40):
        question = f"question {n} " + "words " * 60  # about 90 tokens each
        messages = c.messages_for(question)
        assert prompt_tokens(messages) + 120 <= 1024
        assert messages[0] == {"role": "system", "content": "Be brief."}
        assert messages[-1] == {"role": "user", "content": question}
        c.remember(question, f"answer {n}")
    assert len(c.history) == 80  # the history is kept; only the prompt is windowed
    await c.close()


def test_an_oversized_message_is_cut_to_its_end_with_a_log_line(caplog):
    c = conversation(context=512, answer=100)
    question = "blah " * 2000 + "What is the capital of France?"
    with caplog.at_level(logging.WARNING):
        messages = c.messages_for(question)
    assert prompt_tokens(messages) + 100 <= 512
    assert messages[-1]["content"].endswith("What is the capital of France?")
    assert len(messages) == 2  # no room for history
    assert "does not fit the LLM context" in caplog.text
    assert messages[-1]["content"].startswith(CUT_MARK)  # the model is told its start is missing


def test_a_message_of_costly_characters_is_cut_by_the_llms_own_count():
    def four_a_character(text: str) -> int:  # as a CJK extension character in SmolLM2's vocabulary
        return 4 * len(text)

    c = Conversation(
        "Be brief.",
        history_turns=8,
        context_tokens=2048,
        answer_tokens=120,
        prefill=Prefills(),
        count_tokens=four_a_character,
    )
    c.history.extend(exchanges(2))
    question = "\U00020000" * 1990  # 7960 tokens: under a quarter of the characters' estimate it looked short
    messages = c.messages_for(question)
    assert prompt_tokens(messages, four_a_character) + 120 + MESSAGE_OVERHEAD_TOKENS <= 2048
    assert len(messages) == 2  # no room for history
    cut = messages[-1]["content"]
    assert cut.startswith(CUT_MARK) and question.endswith(cut[len(CUT_MARK) :]) and len(cut) > 400


def test_history_turns_zero_sends_no_history():
    c = conversation(turns=0)
    c.history.extend([{"role": "user", "content": "old"}, {"role": "assistant", "content": "older"}])
    assert c.messages_for("new")[1:] == [{"role": "user", "content": "new"}]


async def test_remembering_an_exchange_prefills_the_next_prompt():
    prefills = Prefills()
    c = conversation(prefill=prefills)
    c.remember("", "Hello!")  # a greeting answers nobody
    c.remember("Hi", "How can I help?")
    await asyncio.sleep(0)
    assert c.history == [
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "How can I help?"},
    ]
    # One prefill at a time; it reads the history when it runs, and ends where the next user's words go.
    no_words_yet = {"role": "user", "content": ""}
    assert prefills.calls == [[{"role": "system", "content": "Be brief."}, *c.history, no_words_yet]]
    await c.close()


async def test_the_users_words_so_far_are_prefilled_after_the_history():
    prefills = Prefills()
    c = conversation(prefill=prefills)
    c.history.extend([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}])
    c.prefill_question("Do you have any")
    c.prefill_question("Do you have any vegetarian")  # skipped: the one before still runs
    await asyncio.sleep(0)
    assert prefills.calls == [[*c.messages_for("x")[:-1], {"role": "user", "content": "Do you have any"}]]
    await c.close()


async def test_a_failing_prefill_is_only_logged(caplog):
    async def broken(messages):
        raise ConnectionError("gone")

    c = conversation(prefill=broken)
    c.remember("Hi", "Hello.")
    await asyncio.sleep(0.01)
    assert "prefilling the LLM cache failed" in caplog.text
    await c.close()


def exchanges(n: int) -> list[dict]:
    return [
        m for i in range(n) for m in ({"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"})
    ]


def test_only_the_last_answers_kept_stay_in_the_prompt_with_every_user_message():
    c = Conversation(
        "Be brief.", history_turns=8, context_tokens=2048, answer_tokens=120, prefill=Prefills(), answers_kept=1
    )
    c.history.extend(exchanges(3))
    assert [m["content"] for m in c.messages_for("q3")[1:]] == ["q0", "q1", "q2", "a2", "q3"]
    none = Conversation(
        "Be brief.", history_turns=8, context_tokens=2048, answer_tokens=120, prefill=Prefills(), answers_kept=0
    )
    none.history.extend(exchanges(2))
    assert [m["content"] for m in none.messages_for("q2")[1:]] == ["q0", "q1", "q2"]


def test_a_tool_call_stays_with_its_result_when_older_answers_go():
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}],
    }
    result = {"role": "tool", "tool_call_id": "1", "content": "42"}
    window = [{"role": "user", "content": "q0"}, call, result, {"role": "assistant", "content": "a0"}, *exchanges(1)]
    assert older_answers_left_out(window, 1) == [window[0], call, result, *exchanges(1)]


def test_only_the_embedded_model_leaves_its_answers_out_by_default():
    from voice_agent.config import Settings

    assert answers_kept(Settings()) == 0
    assert answers_kept(Settings(llm_model="/models/llama.gguf")) is None
    assert answers_kept(Settings(llm="vllm")) is None
    assert answers_kept(Settings(history_answers=3)) == 3
