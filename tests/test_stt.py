import pytest

from voice_agent.engines.stt import looks_looped


@pytest.mark.parametrize(
    "text, looped",
    [
        ("Can I get a table for 6 6 6 6", True),
        ("My flight lands at 9 in the morning 9 in the morning 9 in the morning", True),
        ("yes yes yes yes yes yes", True),
        ("What is the capital of France?", False),
        ("No, no, I said no.", False),
        ("My number is 555-0192.", False),
    ],
)
def test_a_looping_decoder_is_recognized(text, looped):
    assert looks_looped(text) is looped


@pytest.mark.models
def test_decoding_on_its_own_threads_gives_the_same_words():
    """The decoder runs on a second copy of the model with other threads: the words must not change."""
    import soundfile

    from tests.speech import SHARED_AUDIO
    from voice_agent.audio import resample
    from voice_agent.engines.stt import SAMPLE_RATE, WhisperSTT

    audio, rate = soundfile.read(SHARED_AUDIO / "jfk.flac", dtype="float32")
    audio = resample(audio.mean(axis=1) if audio.ndim > 1 else audio, rate, SAMPLE_RATE)[: 6 * SAMPLE_RATE]
    split = WhisperSTT(threads=2, decode_threads=1)
    together = WhisperSTT(threads=2, decode_threads=2)
    assert split._decoder is not split._model.model and together._decoder is together._model.model
    words = split.transcribe_blocking(audio)
    assert "fellow Americans" in words
    assert words == together.transcribe_blocking(audio)


@pytest.mark.models
async def test_background_partials_read_the_same_words_on_threads_of_the_idle_class():
    """Partials on their own copies of the models, built in the background class (engines/priority.py)."""
    import os

    import soundfile

    from tests.speech import SHARED_AUDIO
    from voice_agent.audio import resample
    from voice_agent.engines.priority import in_background_class
    from voice_agent.engines.stt import SAMPLE_RATE, WhisperSTT

    def idle_threads() -> int:
        tasks = os.listdir("/proc/self/task")
        return sum(1 for task in tasks if os.sched_getscheduler(int(task)) == getattr(os, "SCHED_IDLE", -1))

    audio, rate = soundfile.read(SHARED_AUDIO / "jfk.flac", dtype="float32")
    audio = resample(audio.mean(axis=1) if audio.ndim > 1 else audio, rate, SAMPLE_RATE)[: 6 * SAMPLE_RATE]
    before = idle_threads()
    stt = WhisperSTT(background_partials=True)
    try:
        words = await stt.transcribe(audio)
        assert "fellow Americans" in words
        assert await stt.transcribe_partial(audio) == words
        if hasattr(os, "SCHED_IDLE"):
            # CTranslate2's workers of both copies, and the OpenMP thread of the encoder's.
            assert idle_threads() - before >= 3
            assert not in_background_class()  # the calling threads hold the GIL: never in the idle class
    finally:
        await stt.close()
