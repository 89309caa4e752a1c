"""ctypes over ``libaec3_shim.so`` (build.sh): WebRTC's AEC3 with its ``EchoCanceller3Config`` set by field name.

aec3 = ConfiguredAEC3({"filter.initial_state_seconds": 0.5})
cleaned = aec3(played_frame, heard_frame)   # 10 ms int16 frames at 16 kHz, as echo_compare.py's cancellers
aec3.statistics()                            # ERL, ERLE, delay from AudioProcessing::GetStatistics
"""

from __future__ import annotations

import ctypes
import math
import os
from pathlib import Path

import numpy as np

RATE = 16000
FRAME = RATE // 100
LIBRARY = Path(os.environ.get("AEC3_SHIM", Path(__file__).parent / "_build" / "libaec3_shim.so"))

_lib = ctypes.CDLL(str(LIBRARY))
_lib.aec3_field_count.restype = ctypes.c_int
_lib.aec3_field_name.restype = ctypes.c_char_p
_lib.aec3_field_name.argtypes = [ctypes.c_int]
_lib.aec3_config_new.restype = ctypes.c_void_p
_lib.aec3_config_free.argtypes = [ctypes.c_void_p]
_lib.aec3_config_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double]
_lib.aec3_config_get.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_double)]
_lib.aec3_config_validate.argtypes = [ctypes.c_void_p]
_lib.aec3_set_field_trials.argtypes = [ctypes.c_char_p]
_lib.aec3_apm_new.restype = ctypes.c_void_p
_lib.aec3_apm_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
_lib.aec3_apm_free.argtypes = [ctypes.c_void_p]
_lib.aec3_set_stream_delay_ms.argtypes = [ctypes.c_void_p, ctypes.c_int]
_lib.aec3_process_reverse.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_lib.aec3_process_capture.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_lib.aec3_statistics.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 4

FIELDS = [_lib.aec3_field_name(index).decode() for index in range(_lib.aec3_field_count())]


def defaults() -> dict[str, float]:
    """Every exposed field at EchoCanceller3Config's default."""
    config = _lib.aec3_config_new()
    try:
        return {name: _get(config, name) for name in FIELDS}
    finally:
        _lib.aec3_config_free(config)


def _get(config: int, name: str) -> float:
    value = ctypes.c_double()
    if _lib.aec3_config_get(config, name.encode(), ctypes.byref(value)) != 0:
        raise KeyError(name)
    return value.value


class ConfiguredAEC3:
    """AudioProcessing with AEC3 alone, built from ``settings`` over the default config.

    ``field_trials`` are WebRTC's process-wide switches (e.g. ``WebRTC-Aec3TransparentModeHmm/Enabled/``); AEC3
    reads them when it is created, so each instance sets its own (empty: none) first.
    """

    def __init__(self, settings: dict[str, float] | None = None, field_trials: str = "") -> None:
        config = _lib.aec3_config_new()
        try:
            for name, value in (settings or {}).items():
                if _lib.aec3_config_set(config, name.encode(), float(value)) != 0:
                    raise KeyError(f"AEC3 config has no exposed field {name!r}")
            if not _lib.aec3_config_validate(config):
                clamped = {name: _get(config, name) for name in settings or {}}
                raise ValueError(f"AEC3 clamps this config: {clamped}")
            _lib.aec3_set_field_trials(field_trials.encode())
            self._apm = _lib.aec3_apm_new(config, RATE)
        finally:
            _lib.aec3_config_free(config)
        if not self._apm:
            raise RuntimeError("AudioProcessing could not be created")
        self._reverse = np.empty(FRAME, np.int16)

    def __del__(self) -> None:
        if getattr(self, "_apm", None):
            _lib.aec3_apm_free(self._apm)

    def __call__(self, played: np.ndarray, heard: np.ndarray) -> np.ndarray:
        played = np.ascontiguousarray(played, np.int16)
        out = np.array(heard, np.int16, copy=True)
        if _lib.aec3_process_reverse(self._apm, played.ctypes.data) != 0:
            raise RuntimeError("ProcessReverseStream failed")
        if _lib.aec3_process_capture(self._apm, out.ctypes.data) != 0:
            raise RuntimeError("ProcessStream failed")
        return out

    def statistics(self) -> dict[str, float | None]:
        erl, erle, divergent = ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
        delay = ctypes.c_int()
        _lib.aec3_statistics(
            self._apm, ctypes.byref(erl), ctypes.byref(erle), ctypes.byref(delay), ctypes.byref(divergent)
        )

        def known(value: float) -> float | None:
            return None if math.isnan(value) else value

        return {
            "erl_db": known(erl.value),
            "erle_db": known(erle.value),
            "delay_ms": None if delay.value < 0 else delay.value,
            "divergent_filter_fraction": known(divergent.value),
        }
