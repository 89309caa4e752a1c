"""A final transcript's wall time while partial transcripts run beside it, with the partials on the finals'
models at ordinary priority or on copies in the idle class (``--stt-background-partials``).

One process loads both set-ups. Each round: one worker reads partials back to back (the words so far of a
turn, as the partials' worker does with several sessions speaking), while finals are timed one after
another on the finals' path; then the same with the other set-up. Rounds alternate the set-ups, so a load
that changes over time hits both alike. Also timed: the partials that completed meanwhile, and finals
alone (no partials) at the start and end.

    .venv/bin/python experiments/partials_idle [--rounds R] [--finals N]

(from the checkout's root, with PYTHONPATH=. where the venv's package is another checkout's)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `serve` sets it, before OpenMP loads

import numpy as np
import soundfile

from voice_agent.audio import resample
from voice_agent.engines.stt import SAMPLE_RATE, WhisperSTT

AUDIO = Path(__file__).resolve().parents[3] / "shared" / "audio"


def load_audio() -> tuple[np.ndarray, np.ndarray]:
    path = AUDIO / "jfk.flac" if (AUDIO / "jfk.flac").exists() else Path("/work/shared/audio/jfk.flac")
    audio, rate = soundfile.read(path, dtype="float32")
    audio = resample(audio.mean(axis=1) if audio.ndim > 1 else audio, rate, SAMPLE_RATE)
    return audio[: int(3.5 * SAMPLE_RATE)], audio[: int(2.5 * SAMPLE_RATE)]  # a final, the words so far


async def finals_beside_partials(stt: WhisperSTT, final: np.ndarray, partial: np.ndarray, n: int, partials: bool):
    stop = asyncio.Event()
    done = 0

    async def partials_loop() -> None:
        nonlocal done
        while not stop.is_set():
            await stt.transcribe_partial(partial)
            done += 1

    task = asyncio.create_task(partials_loop()) if partials else None
    await asyncio.sleep(0.05)
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await stt.transcribe(final)
        times.append((time.perf_counter() - started) * 1000)
    stop.set()
    if task is not None:
        await task
    return times, done


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--finals", type=int, default=8)
    args = parser.parse_args()
    final, partial = load_audio()
    setups = {
        "ordinary": WhisperSTT(background_partials=False),
        "idle class": WhisperSTT(background_partials=True),
    }
    for stt in setups.values():
        await stt.warm_up()
    print(f"load average {os.getloadavg()}")
    alone, _ = await finals_beside_partials(setups["ordinary"], final, partial, args.finals, partials=False)
    results: dict[str, list[float]] = {name: [] for name in setups}
    partials_done: dict[str, int] = {name: 0 for name in setups}
    seconds: dict[str, float] = {name: 0.0 for name in setups}
    for index in range(args.rounds):
        order = list(setups) if index % 2 == 0 else list(reversed(setups))
        for name in order:
            started = time.perf_counter()
            times, done = await finals_beside_partials(setups[name], final, partial, args.finals, partials=True)
            seconds[name] += time.perf_counter() - started
            results[name] += times
            partials_done[name] += done
    alone_after, _ = await finals_beside_partials(setups["ordinary"], final, partial, args.finals, partials=False)
    print(f"load average {os.getloadavg()}")
    print(f"finals alone: median {statistics.median(alone + alone_after):.0f} ms")
    for name, times in results.items():
        q = statistics.quantiles(times, n=10)
        print(
            f"{name}: final median {statistics.median(times):.0f} ms, p90 {q[-1]:.0f} ms ({len(times)} finals); "
            f"{partials_done[name]} partials in {seconds[name]:.1f} s"
        )
    for stt in setups.values():
        await stt.close()


asyncio.run(main())
