import asyncio

import numpy as np
import pytest

from voice_agent.engines.phrase_cache import PhraseCache, spoken_chunks


class CountingTTS:
    """Each synthesis of a text gives a new array, and is counted."""

    sample_rate = 16000

    def __init__(self):
        self.said: list[str] = []
        self.closed = False

    async def synthesize(self, text):
        self.said.append(text)
        await asyncio.sleep(0)
        yield np.full(len(text.split()) * 100, 0.1 * len(self.said), dtype=np.float32)

    async def warm_up(self):
        pass

    async def close(self):
        self.closed = True


async def say(voice, text: str) -> np.ndarray:
    return np.concatenate([piece async for piece in voice.synthesize(text)])


async def test_a_short_chunk_said_again_is_not_synthesized_again():
    tts = CountingTTS()
    voice = PhraseCache(tts, size=8)
    first = await say(voice, "I'm sorry,")
    again = await say(voice, "I'm sorry,")
    assert tts.said == ["I'm sorry,"]
    assert np.array_equal(first, again)


async def test_a_long_chunk_is_synthesized_each_time():
    tts = CountingTTS()
    voice = PhraseCache(tts, size=8, max_words=4)
    for _ in range(2):
        await say(voice, "We open at nine on Sundays.")
    assert tts.said == ["We open at nine on Sundays."] * 2


async def test_the_least_recently_said_chunk_goes_first():
    tts = CountingTTS()
    voice = PhraseCache(tts, size=2)
    for text in ("Sure.", "Okay.", "Sure.", "Yes.", "Sure.", "Okay."):
        await say(voice, text)
    # "Okay." was dropped for "Yes.", and "Sure." stayed because it was said again.
    assert tts.said == ["Sure.", "Okay.", "Yes.", "Okay."]


async def test_a_chunk_cut_short_is_not_kept():
    tts = CountingTTS()
    voice = PhraseCache(tts, size=8)
    pieces = voice.synthesize("Of course.")
    await anext(pieces)
    await pieces.aclose()  # a barge-in stopped the reply mid-chunk
    await say(voice, "Of course.")
    assert tts.said == ["Of course.", "Of course."]


async def test_without_a_size_only_pinned_chunks_are_kept():
    tts = CountingTTS()
    voice = PhraseCache(tts)
    await voice.pin(["One moment."])
    for _ in range(2):
        await say(voice, "One moment.")
        await say(voice, "Sure.")
    assert tts.said == ["One moment.", "Sure.", "Sure."]


async def test_pinned_chunks_stay_however_many_others_are_said():
    tts = CountingTTS()
    voice = PhraseCache(tts, size=1)
    await voice.pin(["Still working on it."])
    for text in ("Sure.", "Okay.", "Yes."):
        await say(voice, text)
    await say(voice, "Still working on it.")
    assert tts.said == ["Still working on it.", "Sure.", "Okay.", "Yes."]


async def test_the_kept_audio_cannot_be_changed_by_a_session():
    voice = PhraseCache(CountingTTS(), size=8)
    await say(voice, "Sure.")
    piece = await anext(voice.synthesize("Sure."))
    with pytest.raises(ValueError):
        piece[0] = 1.0


async def test_closing_the_cache_closes_its_tts():
    tts = CountingTTS()
    await PhraseCache(tts).close()
    assert tts.closed


def test_a_filler_is_kept_as_every_chunk_it_can_be_spoken_as():
    chunks = spoken_chunks(["One moment while I check that."], first_chunk_min_words=2, phrase_breaks=True)
    # First in an answer it is cut before "while"; later it is one sentence.
    assert chunks == {"One moment", "while I check that.", "One moment while I check that."}
