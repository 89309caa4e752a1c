"""Silero VAD v6, streaming, on onnxruntime.

The ONNX model ships inside faster-whisper. One inference session is shared
by the whole process; each stream keeps its own LSTM state (h, c) and the
last 64 samples of context that the model expects before every 512-sample
window. The model takes a sequence of windows per call, carrying the state
from one to the next, so all windows that are ready go in one call.
"""

from __future__ import annotations

import os

import numpy as np
import onnxruntime

SAMPLE_RATE = 16000
WINDOW = 512  # 32 ms at 16 kHz: the window Silero v5/v6 are trained on
CONTEXT = 64
WINDOW_MS = WINDOW * 1000 // SAMPLE_RATE
PREROLL_SAMPLES = SAMPLE_RATE * 3 // 10  # a turn starts 300 ms before detected speech: Silero fires late


def default_model_path() -> str:
    import faster_whisper

    return os.path.join(os.path.dirname(faster_whisper.__file__), "assets", "silero_vad_v6.onnx")


class SileroVAD:
    """The shared model. Create one :class:`VADStream` per audio stream."""

    def __init__(self, model_path: str = ""):
        options = onnxruntime.SessionOptions()
        # One window costs well under a millisecond; threads only add overhead.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.model_path = model_path or default_model_path()
        self.session = onnxruntime.InferenceSession(
            self.model_path, sess_options=options, providers=["CPUExecutionProvider"]
        )

    def stream(self) -> VADStream:
        return VADStream(self)

    def infer(self, windows: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Probabilities for consecutive windows, each with its context: shape (n, CONTEXT + WINDOW)."""
        return self.session.run(None, {"input": windows, "h": h, "c": c})


class VADStream:
    """Feed 16 kHz float32 audio of any length; get one probability per 512-sample window."""

    def __init__(self, model: SileroVAD):
        self._model = model
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        # The context before each window is the tail of the audio just before it.
        self._audio = np.zeros(CONTEXT, dtype=np.float32)

    def process(self, samples: np.ndarray) -> list[float]:
        self._audio = np.concatenate([self._audio, samples.astype(np.float32, copy=False)])
        count = (len(self._audio) - CONTEXT) // WINDOW
        if count == 0:
            return []
        windows = np.lib.stride_tricks.sliding_window_view(self._audio, CONTEXT + WINDOW)[: count * WINDOW : WINDOW]
        probabilities, self._h, self._c = self._model.infer(np.ascontiguousarray(windows), self._h, self._c)
        self._audio = self._audio[count * WINDOW :]
        return [float(p) for p in probabilities.reshape(-1)]
