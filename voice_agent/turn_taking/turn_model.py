"""P(the user's turn has ended | what is known at this moment of their pause): a fitted logistic model.

Its inputs are the signals the pipeline already has at a pause (``TurnSignals``)
and the silence so far; its coefficients (``turn_model.json``) were fitted by
``experiments/turn_model/fit.py`` on pauses of real meeting speech (AMI, labelled
by who speaks next) and of the endpointing eval's synthetic turns, and checked
on recordings held out of the fit (docs/results/endpointing.md).

The log of the silence enters linearly, with a slope of its own after a
complete and after an incomplete transcript, so for one set of signals the
probability rises with the silence, and the silence at which it reaches a
given level has a closed form (:meth:`TurnModel.silence_for`).
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .speech_act import hands_over, speech_act
from .turn import Completeness, TurnSignals, fused_completeness, has_words

MODEL_PATH = Path(__file__).with_name("turn_model.json")
SILENCE_UNIT_MS = 100.0  # log-silence is 0 at 100 ms
LLM_FLOOR = -6.0  # a broken-off sentence scores -10 to -21, a thinking pause after a telling -2 to -6: below this the LLM says nothing more
# Inputs that do not depend on the silence, then those that do (the log of the silence, alone and
# after a complete or an incomplete transcript).
STATIC = (
    "bias",
    "complete",
    "incomplete",
    "hands_over",
    "question_mark",
    "llm_known",
    "llm_logprob",
    "no_words",
    "final_punctuation",
    "ends_in_number",
)
SLOPES = ("log_silence", "log_silence_complete", "log_silence_incomplete")
FEATURES = STATIC + SLOPES


_LAST_WORD = re.compile(r"([\w']+)\W*$")


def _last_word(text: str) -> str:
    match = _LAST_WORD.search(text.lower())
    return match.group(1) if match else ""


def static_features(signals: TurnSignals) -> np.ndarray:
    """The inputs that the silence does not change, in ``STATIC``'s order.

    Beside the fused level and the speech act: Whisper's sentence-final
    punctuation, and whether the words end in a number ("... around 730."),
    which the fused level calls neither complete nor unfinished.
    """
    level = fused_completeness(signals)
    text = signals.transcript or ""
    logprob = signals.end_of_turn_logprob
    last = _last_word(text)
    stripped = text.rstrip()
    return np.array(
        [
            1.0,
            float(level is Completeness.COMPLETE),
            float(level is Completeness.INCOMPLETE),
            float(has_words(text) and hands_over(speech_act(text))),
            float(text.rstrip().endswith("?")),
            float(logprob is not None),
            0.0 if logprob is None else max(LLM_FLOOR, logprob),
            float(not has_words(text)),
            float(stripped.endswith((".", "!", "?")) and not stripped.endswith("...")),
            float(any(c.isdigit() for c in last)),
        ]
    )


def slope_features(static: np.ndarray) -> np.ndarray:
    """Multipliers of the log-silence, in ``SLOPES``' order."""
    return np.array([1.0, static[1], static[2]])


def log_silence(silence_ms: float) -> float:
    return math.log(max(silence_ms, 1.0) / SILENCE_UNIT_MS)


def features(signals: TurnSignals, silence_ms: float) -> np.ndarray:
    """All inputs, in ``FEATURES``' order."""
    static = static_features(signals)
    return np.concatenate([static, slope_features(static) * log_silence(silence_ms)])


@dataclass(frozen=True)
class TurnModel:
    weights: np.ndarray  # one per FEATURES

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> TurnModel:
        data = json.loads(path.read_text(encoding="utf-8"))
        if tuple(data["features"]) != FEATURES:
            raise ValueError(f"{path}: features {data['features']} are not {list(FEATURES)}")
        return cls(np.array(data["weights"], dtype=np.float64))

    def probability(self, signals: TurnSignals, silence_ms: float) -> float:
        return float(1.0 / (1.0 + math.exp(-float(self.weights @ features(signals, silence_ms)))))

    def silence_for(self, signals: TurnSignals, probability: float) -> float:
        """The silence at which the turn has ended with ``probability``; inf: never, by the model alone."""
        static = static_features(signals)
        base = float(self.weights[: len(STATIC)] @ static)
        slope = float(self.weights[len(STATIC) :] @ slope_features(static))
        target = math.log(probability / (1.0 - probability))
        if slope <= 0.0:
            return 0.0 if base >= target else math.inf
        return SILENCE_UNIT_MS * math.exp(min((target - base) / slope, 50.0))


@functools.cache
def default_model() -> TurnModel:
    """The packaged coefficients, read once per process."""
    return TurnModel.load()
