"""Is one batched Whisper call for several sessions' finals faster than one call each?

Runs the embedded tiny.en (int8, as `serve` loads it, through voice_agent.stt.WhisperSTT) on N short
finals (the benchmark conversation's turns) three ways and prints the wall time for the N:

- one at a time: N calls on one worker, what a single session would see N times;
- two workers: N calls through WhisperSTT's own two-thread pool, what `serve` does today;
- batched: the N finals' features in one window (the longest + 2 s), one encode of the batch, one
  generate with N prompts (CTranslate2's batched Whisper);
- batched on two workers: two such batches of N/2 at once on the two workers.

  .venv/bin/python experiments/stt_batch [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from voice_agent.audio import PIPELINE_RATE
from voice_agent.engines.stt import MAX_TOKENS_PER_S, SAMPLE_RATE, WhisperSTT

TURNS = Path(__file__).resolve().parents[2] / "voice_agent" / "bench" / "turns" / "bench_turns"
FILES = ["open_tonight.flac", "close_sundays.flac", "bring_my_dog.flac", "vegetarian.flac"]


def load(name: str) -> np.ndarray:
    audio, rate = sf.read(TURNS / name, dtype="float32")
    assert rate == PIPELINE_RATE, rate
    return audio


def batched(stt: WhisperSTT, audios: list[np.ndarray]) -> list[str]:
    model = stt._model
    extractor = model.feature_extractor
    window_s = max(stt.window_s, max(len(a) for a in audios) / SAMPLE_RATE + 2)
    frames = int(window_s * SAMPLE_RATE) // extractor.hop_length
    feats = []
    for audio in audios:
        f = extractor(audio)[:, :frames]
        feats.append(np.pad(f, ((0, 0), (0, frames - f.shape[1]))))
    encoded = model.encode(np.stack(feats))
    max_tokens = int(max(len(a) for a in audios) / SAMPLE_RATE * MAX_TOKENS_PER_S) + 10
    results = stt._decoder.generate(
        encoded,
        [stt._prompt] * len(audios),
        beam_size=stt.beam_size,
        max_length=max_tokens,
        suppress_blank=True,
        suppress_tokens=[-1],
    )
    return [stt._tokenizer.decode(r.sequences_ids[0]).strip() for r in results]


async def two_workers(stt: WhisperSTT, audios: list[np.ndarray]) -> list[str]:
    return list(await asyncio.gather(*(stt.transcribe(a) for a in audios)))


async def two_batches(stt: WhisperSTT, audios: list[np.ndarray]) -> None:
    loop = asyncio.get_running_loop()
    half = len(audios) // 2
    await asyncio.gather(
        *(loop.run_in_executor(stt._executor, batched, stt, part) for part in (audios[:half], audios[half:]))
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    stt = WhisperSTT()  # serve's defaults: 2 encoder threads, 1 decoder thread, 2 workers
    audios = [load(name) for name in FILES]
    print("durations s:", [round(len(a) / SAMPLE_RATE, 2) for a in audios])
    for a in audios:
        stt.transcribe_blocking(a)  # warm
    print(platform.processor() or platform.machine(), "load average", open("/proc/loadavg").read().split()[:3])
    for n in (2, 4):
        batch = audios[:n]
        times: dict[str, list[float]] = {
            "one at a time": [],
            "two workers": [],
            "batched": [],
            "batched on two workers": [],
        }
        for _ in range(args.rounds):
            t = time.perf_counter()
            single = [stt.transcribe_blocking(a) for a in batch]
            times["one at a time"].append(time.perf_counter() - t)
            t = time.perf_counter()
            asyncio.run(two_workers(stt, batch))
            times["two workers"].append(time.perf_counter() - t)
            t = time.perf_counter()
            together = batched(stt, batch)
            times["batched"].append(time.perf_counter() - t)
            t = time.perf_counter()
            asyncio.run(two_batches(stt, batch))
            times["batched on two workers"].append(time.perf_counter() - t)
        same = sum(x == y for x, y in zip(single, together))
        row = ", ".join(f"{k} {statistics.median(v) * 1000:.0f} ms" for k, v in times.items())
        print(f"{n} finals (median of {args.rounds}): {row}; batched words equal in {same} of {n}")
    print("load average", open("/proc/loadavg").read().split()[:3])


main()
