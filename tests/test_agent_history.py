"""An agent's tool calls in the history: kept with their exchange, never split from it by the window."""

from __future__ import annotations

from voice_agent.agent.conversation import Conversation, prompt_tokens, recent_history


def exchange(i: int, tools: bool = False) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": f"question {i}"}]
    if tools:
        call = {"id": f"c{i}", "type": "function", "function": {"name": "book", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "booked"},
        ]
    return [*messages, {"role": "assistant", "content": f"answer {i}"}]


def test_the_window_counts_exchanges_by_user_messages_and_keeps_tool_messages_whole():
    history = [{"role": "assistant", "content": "Hello."}]
    for i in range(12):
        history += exchange(i, tools=i % 3 == 0)
    kept = recent_history(history, 8)
    # 12 exchanges, 8 kept at most, dropped in steps of 4: exchanges 4 to 11.
    assert kept[0] == {"role": "user", "content": "question 4"}
    assert sum(m["role"] == "user" for m in kept) == 8
    for index, message in enumerate(kept):
        if message["role"] == "tool":
            assert kept[index - 1].get("tool_calls"), "a result without its call"
    assert kept == history[history.index(kept[0]) :]


def test_plain_histories_are_windowed_as_before():
    history = [{"role": "assistant", "content": "Hello."}]
    for i in range(10):
        history += exchange(i)
    assert recent_history(history, 8) == history[-2 * 6 :]  # 10 exchanges: 4 dropped, a whole step
    assert recent_history(history[:9], 8) == history[:9]  # greeting and 4 exchanges: all kept


def test_tool_calls_count_toward_the_token_estimate():
    plain, with_tools = exchange(1), exchange(1, tools=True)
    assert prompt_tokens(with_tools) > prompt_tokens(plain) + 10


async def test_remember_puts_the_tool_messages_between_question_and_answer():
    async def prefill(messages):
        pass

    conversation = Conversation("Be brief.", history_turns=8, context_tokens=2048, answer_tokens=100, prefill=prefill)
    tool_messages = exchange(1, tools=True)[1:3]
    conversation.remember("Book it.", "Booked.", tool_messages)
    assert [m["role"] for m in conversation.history] == ["user", "assistant", "tool", "assistant"]
    assert conversation.messages_for("Thanks")[1:-1] == conversation.history
    await conversation.close()
