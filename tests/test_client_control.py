"""What a client controls itself, through ClientControl's own methods, on a session with fake engines."""

from __future__ import annotations

from types import SimpleNamespace

from tests.test_session import Harness
from voice_agent.agent.conversation_items import REMEMBERED_ANSWERS
from voice_agent.protocols.events import (
    Error,
    SessionConfig,
    SessionStarted,
    SessionUpdate,
    Truncated,
    TruncateRequest,
    UserText,
    UserTextAdded,
)


def played(text: str, seconds: float) -> SimpleNamespace:
    """A reply as truncation sees it: ``seconds`` of audio sent and heard, its words spread evenly over them."""
    words = text.split()

    def text_until(s: float) -> str:
        return " ".join(words[: int(len(words) * min(s, seconds) / seconds)])

    return SimpleNamespace(sent_s=seconds, heard_s=lambda: seconds, text_until=text_until)


async def test_waiting_input_is_taken_once_and_only_its_words():
    h = Harness()
    control = h.session.control
    control.handle(UserText("Table for two."))
    control.items.add_text("  ")
    control.items.add_text("At eight.")
    assert h.of(UserTextAdded) == [UserTextAdded("Table for two.")]
    assert control.take_ready_input() == "Table for two. At eight."
    assert control.take_ready_input() == ""
    await h.session.close()


async def test_only_the_latest_answers_can_be_truncated():
    h = Harness()
    control = h.session.control
    for number in range(1, REMEMBERED_ANSWERS + 2):
        control.items.playing(number, played("one two three four", 2.0))
    control.handle(TruncateRequest(1, 1000, "e1"))
    assert h.of(Error)[-1].code == "item_not_found"
    control.handle(TruncateRequest(2, 1000, "e2"))
    assert h.of(Truncated) == [Truncated(2, 1000, "one two")]
    control.handle(TruncateRequest(2, 2500, "e3"))  # past the audio sent
    assert h.of(Error)[-1].code == "invalid_value" and len(h.of(Truncated)) == 1
    await h.session.close()


async def test_a_truncation_before_the_answer_is_remembered_applies_once_it_is():
    h = Harness()
    control = h.session.control
    reply = played("one two three four", 2.0)
    control.items.playing(1, reply)
    control.handle(TruncateRequest(1, 1000))
    message = h.session.conversation.remember("Count.", "one two three four")
    control.items.remembered(reply, message)
    assert h.session.history[-1] == {"role": "assistant", "content": "one two"}
    await h.session.close()


async def test_start_options_set_the_prompt_and_an_update_reports_the_settings_in_effect():
    h = Harness()
    control = h.session.control
    control.start(SessionStarted(16000, {"system_prompt": "  Be brief.  "}))
    assert h.session.conversation.system_prompt == "Be brief."
    control.handle(SessionUpdate(instructions="Be a pirate.", voice="nobody", max_output_tokens=12))
    assert h.of(Error)[-1].code == "invalid_voice"
    config = h.of(SessionConfig)[-1]
    assert (config.instructions, config.voice, config.max_output_tokens) == ("Be a pirate.", control.voice, 12)
    assert h.session.replies.max_output_tokens == 12
    await h.session.close()
