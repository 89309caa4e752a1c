from voice_agent.engines.chunker import MAX_CHUNK_CHARS, SentenceChunker
from voice_agent.engines.speakable import speakable


def chunk_stream(text: str, step: int = 3, first_words: int = 3) -> list[str]:
    chunker = SentenceChunker(first_words)
    chunks = []
    for start in range(0, len(text), step):
        chunks += chunker.push(text[start : start + step])
    return chunks + chunker.flush()


def test_first_chunk_is_an_early_clause_then_sentences():
    text = "Well, the capital of France, as you know, is Paris. It has museums, parks and cafes. Enjoy!"
    assert chunk_stream(text) == [
        "Well, the capital of France,",
        "as you know, is Paris.",
        "It has museums, parks and cafes.",
        "Enjoy!",
    ]


def test_short_leading_clause_waits_for_enough_words():
    assert chunk_stream("Yes, of course. Bye.", first_words=3) == ["Yes, of course.", "Bye."]


def test_numbers_decimals_and_abbreviations_do_not_split():
    text = "Dr. Smith paid $3.50 for 1,000 grams, i.e. a lot, at 5 p.m. today. Then he left."
    assert chunk_stream(text, first_words=50) == [
        "Dr. Smith paid $3.50 for 1,000 grams, i.e. a lot, at 5 p.m. today.",
        "Then he left.",
    ]


def test_initials_do_not_split_but_no_does():
    assert chunk_stream("J. R. R. Tolkien wrote it. No. I am sure.", first_words=50) == [
        "J. R. R. Tolkien wrote it.",
        "No.",
        "I am sure.",
    ]


def test_boundary_needs_the_next_character():
    chunker = SentenceChunker()
    assert chunker.push("It costs 3.") == []  # could still be 3.5
    assert chunker.push("5 euros. Next") == ["It costs 3.5 euros."]
    assert chunker.flush() == ["Next"]


def test_question_marks_quotes_and_newlines():
    assert chunk_stream('He said "hi!" Then?\nOkay', first_words=50) == ['He said "hi!"', "Then?", "Okay"]


def test_punctuation_only_text_is_dropped():
    assert chunk_stream("... !") == []


def test_the_second_chunk_may_end_at_a_long_enough_clause():
    text = (
        "We have a lot of things, and I am not really happy to recommend anything, "
        "but I can tell you about the fish, which is fresh today. Thanks."
    )
    assert chunk_stream(text, first_words=2) == [
        "We have a lot of things,",
        "and I am not really happy to recommend anything,",  # 9 words: the second chunk ends here
        "but I can tell you about the fish, which is fresh today.",  # later chunks are sentences
        "Thanks.",
    ]


def test_a_sentence_longer_than_the_limit_splits_at_its_last_clause_within_it():
    sentence = "word " * 20 + "and more, " + "word " * 10 + "yet more, " + "word " * 40 + "end."
    chunks = chunk_stream("First sentence here. Then a second. " + sentence, first_words=50)
    assert chunks[:2] == ["First sentence here.", "Then a second."]
    assert chunks[2].endswith("yet more,") and len(chunks[2]) <= MAX_CHUNK_CHARS
    assert chunks[3].endswith("end.") and len(chunks) == 4


def test_unpunctuated_text_is_cut_into_bounded_chunks():
    text = " ".join(f"word{i}" for i in range(300))  # 2,000 characters, no punctuation
    chunks = chunk_stream(text, step=7)
    assert len(chunks) >= 2000 // MAX_CHUNK_CHARS
    assert all(len(chunk) <= MAX_CHUNK_CHARS for chunk in chunks)
    assert " ".join(chunks) == text  # cut between words, nothing lost


def test_an_unpunctuated_cut_prefers_a_phrase_start():
    text = "so " + "yes " * 40 + "we have it all " + "because " + "yes " * 40
    chunks = chunk_stream(text, first_words=50)
    assert chunks[0].endswith("we have it all") and chunks[1].startswith("because")


def test_one_endless_token_is_cut_at_the_limit():
    chunks = chunk_stream("x" * 1000)
    assert [len(chunk) for chunk in chunks] == [MAX_CHUNK_CHARS] * 4 + [120]


def phrase_chunks(text: str, step: int = 2) -> list[str]:
    chunker = SentenceChunker(2, phrase_breaks=True)
    chunks = []
    for start in range(0, len(text), step):
        chunks += chunker.push(text[start : start + step])
    return chunks + chunker.flush()


def test_first_chunk_may_end_before_a_phrase():
    assert phrase_chunks("I'm sorry for any confusion, but I can help. Sure.") == [
        "I'm sorry",
        "for any confusion, but I can help.",
        "Sure.",
    ]
    assert phrase_chunks("I'm not available on Sundays. Thanks.") == ["I'm not available", "on Sundays.", "Thanks."]


def test_phrase_break_needs_enough_words_and_a_whole_word():
    assert phrase_chunks("Yes, I'm open tonight.") == ["Yes, I'm open tonight."]
    assert phrase_chunks("Open for lunch.") == ["Open for lunch."]  # one word before "for"
    assert phrase_chunks("I forty two and more.") == ["I forty two", "and more."]  # "forty" is not "for"
    chunker = SentenceChunker(2, phrase_breaks=True)
    assert chunker.push("We are open fo") == []
    assert chunker.push("r") == []  # "for" or "fork"? the next character tells
    assert chunker.push(" you.") == ["We are open"]


def test_phrase_breaks_only_split_the_first_chunk():
    assert phrase_chunks("Sure. I can help with that on Monday.") == ["Sure.", "I can help with that on Monday."]
    assert chunk_stream("I'm sorry for the wait.", first_words=2) == ["I'm sorry for the wait."]  # off by default


def limited(text: str, max_sentences: int, step: int = 3) -> tuple[list[str], bool]:
    chunker = SentenceChunker(2, phrase_breaks=True, max_sentences=max_sentences)
    chunks = []
    for start in range(0, len(text), step):
        chunks += chunker.push(text[start : start + step])
    return chunks + chunker.flush(), chunker.done


def test_the_answer_stops_at_the_sentence_limit():
    text = "I'm sorry for the wait, we are open at nine. We close at six. Parking is free. Bye."
    assert limited(text, 2) == (["I'm sorry", "for the wait, we are open at nine.", "We close at six."], True)
    assert limited(text, 1) == (["I'm sorry", "for the wait, we are open at nine."], True)
    assert limited(text, 0) == (
        ["I'm sorry", "for the wait, we are open at nine.", "We close at six.", "Parking is free.", "Bye."],
        False,
    )


def test_lines_and_forced_cuts_count_as_sentences():
    assert limited("Ingredients:\n- quinoa\n- lentils\n- rice\n", 2)[0] == ["Ingredients:", "- quinoa"]
    chunks, done = limited("yes " * 200, 2)
    assert done and len(chunks) == 2


def test_a_short_answer_is_not_done_before_its_end():
    chunker = SentenceChunker(2, max_sentences=2)
    assert chunker.push("We open at nine. ") == ["We open at nine."] and not chunker.done
    assert chunker.flush() == [] and not chunker.done


def test_a_list_number_does_not_end_a_sentence():
    assert chunk_stream("Sure.\n1. Preheat the oven.\n2. Mix it. It costs 3. Bye.", first_words=50) == [
        "Sure.",
        "1. Preheat the oven.",
        "2. Mix it.",
        "It costs 3.",
        "Bye.",
    ]


def test_a_rewrite_runs_before_counting_and_chunks_left_without_words_are_dropped():
    chunker = SentenceChunker(2, max_sentences=2, rewrite=speakable)
    text = "```python\ndef sort_list(lst):\n    return sorted(lst)\n```\n**That** sorts it. Bye now. More."
    chunks = [chunk for start in range(0, len(text), 4) for chunk in chunker.push(text[start : start + 4])]
    assert chunks + chunker.flush() == ["That sorts it.", "Bye now."]


def push_tokens(chunker: SentenceChunker, tokens: list[str]) -> list[list[str]]:
    """What each token, as an LLM streams it, lets out."""
    return [chunker.push(token) for token in tokens]


def test_the_first_chunk_ends_at_its_punctuation_without_waiting_for_the_next_token():
    assert push_tokens(SentenceChunker(2), ["I", "'m", " sorry", ","]) == [[], [], [], ["I'm sorry,"]]
    assert push_tokens(SentenceChunker(2), ["I", "'m", " not", "."]) == [[], [], [], ["I'm not."]]
    assert push_tokens(SentenceChunker(2), ["Really", "?"]) == [[], ["Really?"]]


def test_punctuation_that_may_go_on_waits_for_the_next_character():
    # "1,000", "Dr. Smith", "J. Smith", a quote that closes after its "!", and a clause under the minimum.
    for tokens in (["It costs 1", ","], ["Ask Dr", "."], ["Call J", "."], ['He said "hi', "!"], ["Yes", ","]):
        assert push_tokens(SentenceChunker(2), tokens) == [[], []], tokens


def test_only_the_first_chunk_ends_before_the_next_token():
    chunker = SentenceChunker(2)
    assert push_tokens(chunker, ["I'm sorry", ",", " we are", " closed", "."]) == [[], ["I'm sorry,"], [], [], []]
    assert chunker.push(" We") == ["we are closed."]
