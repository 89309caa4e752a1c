"""Regenerate the word-boundary synthetic turns (voice_agent/bench/turns/endpoint_turns/words/).

Run from the repository root: .venv/bin/python voice_agent/bench/turns/endpoint_turns/generate_words.py
The same paused turns as generate.py, but each utterance is synthesized once,
whole, with the embedded Piper voice, and each pause is cut in at a word
boundary found with faster-whisper's word timestamps (the pipeline's own
Whisper model): the words before a pause keep the intonation of a speaker who
is going on, not the sentence-final fall of a separately synthesized part
(voice_agent/replay/word_cuts.py). Writes one FLAC per turn and script.yaml;
the FLAC files are committed, as Piper's prosody noise differs run to run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import soundfile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import RATE, TURNS  # noqa: E402  (the turns, and their tags)

from voice_agent.bench.speech import rendition  # noqa: E402
from voice_agent.engines.stt import WhisperSTT, default_model_path  # noqa: E402
from voice_agent.replay.word_cuts import Word, best_cut, boundary_time, insert_pauses, likeness  # noqa: E402

OUT = Path(__file__).resolve().parent / "words"


ATTEMPTS = 4  # Piper's prosody noise gives another rendition each time
LIKE_ENOUGH = 0.5  # each piece between pauses must transcribe at least this like its words (word_cuts.likeness)


def main() -> None:
    from faster_whisper import WhisperModel

    whisper = WhisperModel(default_model_path(), device="cpu", compute_type="int8", cpu_threads=2)
    stt = WhisperSTT()  # the pipeline's own transcription, to judge the cuts
    OUT.mkdir(exist_ok=True)
    entries, left_out = [], []
    for name, tag, parts in TURNS:
        if tag == "whole":
            continue  # one utterance already: the old group's audio is the same kind
        pieces: list[list[str]] = [[]]
        seconds = []
        for part in parts:
            if isinstance(part, str):
                pieces[-1] += part.split()
            else:
                pieces.append([])
                seconds.append(float(part))
        text_words = [word for piece in pieces for word in piece]
        counts = [sum(len(piece) for piece in pieces[: i + 1]) for i in range(len(seconds))]
        for attempt in range(1, ATTEMPTS + 1):
            audio = rendition(" ".join(text_words), RATE)
            segments, _ = whisper.transcribe(audio, language="en", beam_size=1, word_timestamps=True, vad_filter=False)
            heard = [Word(w.word.strip(), w.start, w.end) for segment in segments for w in segment.words or []]
            cuts: list[int] = []
            for count in counts:
                start, end = boundary_time(text_words, heard, count)
                previous = cuts[-1] if cuts else 0
                cuts.append(
                    best_cut(audio, RATE, text_words, count, (start + end) / 2, stt.transcribe_blocking, previous)
                )
            edges = [0, *cuts, len(audio)]
            said = [stt.transcribe_blocking(audio[a:b]) for a, b in zip(edges, edges[1:])]
            scores = [likeness(piece, text) for piece, text in zip(pieces, said)]
            print(f"{name} (attempt {attempt}):", " | ".join(said), f"({min(scores):.2f})")
            if min(scores) >= LIKE_ENOUGH:
                break
        else:
            left_out.append(f"{name}: {' | '.join(said)}")
            continue
        soundfile.write(
            OUT / f"{name}.flac", insert_pauses(audio, RATE, list(zip(cuts, seconds))), RATE, subtype="PCM_16"
        )
        where = ", ".join(f"{s:.1f} s after {text_words[c - 1]!r}" for c, s in zip(counts, seconds))
        entries.append(
            f"  - file: {name}.flac  # {where}; Whisper: {' | '.join(said)}\n"
            f"    expect: {' '.join(text_words)!r}\n    tags: [words, {tag}]\n"
        )
    header = (
        "# Word-boundary synthetic turns (scripts/endpoint_eval --group words).\n"
        "# Audio and this file: voice_agent/bench/turns/endpoint_turns/generate_words.py. Each utterance is synthesized whole;\n"
        "# its pauses (0.3 to 1.5 s) are cut in between two words, where the user is still talking.\n"
        "# After each turn: what the pipeline's Whisper hears in each piece between the pauses.\n"
        + "".join(f"# Left out, no clean cut in {ATTEMPTS} renditions: {line}\n" for line in left_out)
        + "turns:\n"
    )
    (OUT / "script.yaml").write_text(header + "".join(entries), encoding="utf-8")


if __name__ == "__main__":
    main()
