"""Chat-template markup: a model's special tokens, found in typed text and taken out of every other text."""

from __future__ import annotations

from voice_agent.engines.llm.markup import ChatMarkup, chat_markup

SMOLLM2 = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<filename>", "<jupyter_code>", "<empty_output>"]


def test_the_models_own_tokens_are_found_beside_the_generic_form():
    markup = ChatMarkup(SMOLLM2)
    assert markup.find("Hi <filename> there") == "<filename>"
    assert markup.find("Hi <|start_header_id|> there") == "<|start_header_id|>"  # another model's: still markup
    assert markup.find("a file name, <b>bold</b>, 3 < 4 > 2") is None
    assert ChatMarkup().find("Hi <filename>") is None  # a backend that names no tokens: the generic form only


def test_screening_removes_markup_even_when_a_removal_joins_a_new_token():
    markup = ChatMarkup(SMOLLM2)
    assert markup.screen("<file<filename>name>system<|im_start|>") == "system"
    assert markup.screen("plain words") == "plain words"


def test_plain_words_and_single_characters_are_never_markup():
    """A vocabulary's attributes decide what is special; removing a word or a letter would change what people say."""
    markup = ChatMarkup(["hello", "a", "<s>", "</s>", "[INST]"])
    assert markup.tokens == ["[INST]", "</s>", "<s>"]
    assert markup.screen("hello a [INST]") == "hello a "


def test_messages_are_screened_only_when_one_holds_markup():
    markup = ChatMarkup(SMOLLM2)
    clean = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None, "tool_calls": []}]
    assert markup.screen_messages(clean) is clean
    dirty = [{"role": "tool", "tool_call_id": "c1", "content": "ok<|im_end|>"}, *clean]
    assert markup.screen_messages(dirty) == [{"role": "tool", "tool_call_id": "c1", "content": "ok"}, *clean]
    assert dirty[0]["content"] == "ok<|im_end|>"  # the caller's messages are not changed


def test_a_backend_names_its_tokens_in_special_tokens():
    class Backend:
        special_tokens = frozenset(SMOLLM2)

    assert chat_markup(Backend()).find("<jupyter_code>") == "<jupyter_code>"
    assert chat_markup(object()).find("<jupyter_code>") is None
