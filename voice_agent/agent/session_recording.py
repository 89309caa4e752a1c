"""A session's stereo recording: audio placed on the session's timeline, streamed into a WAV.

Every report file (the WAV and the JSON) is written in one disk thread, :data:`DISK`, so that
writes keep their order and never block the event loop.
"""

from __future__ import annotations

import logging
import os
import uuid
import wave
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import numpy as np

from ..audio import float_to_int16
from ..log import log_exception

log = logging.getLogger(__name__)

FILE_MODE = 0o600

# The disk: one thread for every session's files, so that writes keep their order and never block the loop.
DISK = ThreadPoolExecutor(max_workers=1, thread_name_prefix="session-reports")


def create_private_file(path: Path) -> IO[bytes]:
    """A new file only this user can read, mode 0600 from the start (not chmod-ed after)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, FILE_MODE), "wb")


def file_stem(session_id: str) -> str:
    """The session id as a file name: its report is ``STEM.json``, its recording ``STEM.wav``."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in session_id) or "session"


class WavFile:
    """A stereo 16-bit WAV that grows as frames are appended; its header is fixed up when it is finished.

    Written as ``NAME.wav.ID.partial`` and renamed once finished, so a report never names a WAV
    still being written. Every method runs in the disk thread.
    """

    def __init__(self, directory: Path, stem: str, rate: int):
        self.directory = directory
        self.name = f"{stem}.wav"
        self.rate = rate
        self._partial = directory / f"{self.name}.{uuid.uuid4().hex[:8]}.partial"
        self._file: IO[bytes] | None = None
        self._wave: wave.Wave_write | None = None
        self.failed = False
        self.kept = False

    def append(self, frames: bytes) -> None:
        if self.failed:
            return
        try:
            if self._wave is None:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._file = create_private_file(self._partial)
                self._wave = wave.open(self._file, "wb")
                self._wave.setnchannels(2)
                self._wave.setsampwidth(2)
                self._wave.setframerate(self.rate)
            # Raw: writeframes would seek back and patch the header on every call.
            self._wave.writeframesraw(frames)
        except OSError:
            log_exception(log, "writing the recording %s failed; the rest of it is dropped", self._partial)
            self.failed = True
            self._discard()

    def finish(self, keep: bool) -> None:
        if self._wave is None or self.failed:
            return
        try:
            self._wave.close()  # patches the header's sizes
            assert self._file is not None
            self._file.close()
            if keep:
                os.replace(self._partial, self.directory / self.name)
                self.kept = True
            else:
                self._partial.unlink()
        except OSError:
            log_exception(log, "finishing the recording %s failed", self._partial)
            self.failed = True
            self._discard()

    def _discard(self) -> None:
        if self._file is not None and not self._file.closed:
            try:
                self._file.close()
            except OSError:
                pass
        self._partial.unlink(missing_ok=True)


class Track:
    """Mono audio placed at sample offsets, kept from the recording's write position on."""

    def __init__(self) -> None:
        self.pieces: list[tuple[int, np.ndarray]] = []
        self.end = 0

    def add(self, start: int, samples: np.ndarray, floor: int) -> None:
        """Place ``samples`` at ``start``; what would land before ``floor`` (written already) is dropped."""
        if start < floor:
            samples, start = samples[floor - start :], floor
        if len(samples):
            self.pieces.append((start, float_to_int16(samples)))
            self.end = max(self.end, start + len(samples))

    def cut(self, at: int) -> None:
        """Drop everything from sample ``at`` on."""
        self.pieces = [(start, samples[: at - start]) for start, samples in self.pieces if start < at]
        self.end = min(self.end, at)

    def take(self, start: int, end: int) -> np.ndarray:
        """Samples ``start`` to ``end`` (silence where nothing was placed), forgotten once taken."""
        out = np.zeros(end - start, dtype=np.int16)
        kept = []
        for at, samples in self.pieces:
            stop = at + len(samples)
            lo, hi = max(at, start), min(stop, end)
            if lo < hi:
                out[lo - start : hi - start] = samples[lo - at : hi - at]
            if stop > end:
                keep_from = max(at, end)
                kept.append((keep_from, samples[keep_from - at :]))
        self.pieces = kept
        return out
