"""Smart Turn v3.2: an audio end-of-turn model (optional, off unless its file is given).

It judges from the sound of the last 8 s (pitch, lengthening, the fall of a
finished sentence) whether the speaker is done, which the transcript cannot
tell: "So this is the second pass." said with a level voice goes on. The ONNX
file (BSD-2-Clause, 8.7 MB) ships only inside the ``pipecat-ai`` wheel on
PyPI, whose dependencies are far more than this one file needs, so it is not
a dependency; ``--smart-turn-model`` points at a copy (docs/results/endpointing.md,
"The decision", says how to get it and what it measured).

Features are Whisper's log-mel (80 bins, 8 s, the waveform normalized to zero
mean and unit variance), computed with faster-whisper's own extractor: the
same as pipecat's to within 3e-6.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

RATE = 16000
WINDOW = 8 * RATE


class SmartTurn:
    def __init__(self, path: str, threads: int = 1):
        import onnxruntime
        from faster_whisper.feature_extractor import FeatureExtractor

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(path, options)
        self._features = FeatureExtractor(feature_size=80)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="smart-turn")

    def complete_probability_blocking(self, audio: np.ndarray) -> float:
        """Probability that the speaker is done, from the last 8 s of 16 kHz ``audio``."""
        audio = audio[-WINDOW:]
        audio = np.pad(audio, (WINDOW - len(audio), 0))
        audio = (audio - audio.mean()) / np.sqrt(audio.var() + 1e-7)
        features = self._features(audio, padding=0, chunk_length=8)[:, : WINDOW // 160]
        [probability] = self._session.run(None, {"input_features": features[None].astype(np.float32)})
        return float(np.ravel(probability)[0])

    async def complete_probability(self, audio: np.ndarray) -> float:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.complete_probability_blocking, audio)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
