"""A client's choice of turn detection (the Realtime protocol's ``turn_detection``), mapped onto ours.

Pure: from the server's settings and the client's :class:`TurnDetection`, the
session's own copy of the settings (VAD threshold, the three end-of-turn
silences of :mod:`.turn`, preemptive generation), its pre-roll, and the
detection in effect with every field filled in, for the client to see; and
the end-of-turn decision that a copy of the settings asks for.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..audio import PIPELINE_RATE
from ..config import Settings
from ..engines.vad import PREROLL_SAMPLES
from ..protocols.events import MANUAL, SEMANTIC_VAD, SERVER_VAD, TurnDetection
from .pause_habit import PauseHabit
from .turn import TurnDetector
from .turn_model import default_model

# semantic_vad's eagerness scales the cut-in cost and the rules' silences: with the
# defaults "high" weighs a cut-in as 4.8 waits, "low" as 16.
EAGERNESS_SCALE = {"high": 0.6, "medium": 1.0, "auto": 1.0, "low": 2.0}


@dataclass(frozen=True)
class TurnTaking:
    settings: Settings
    preroll_samples: int
    manual: bool  # the client ends turns: no VAD
    in_effect: TurnDetection


def turn_taking(base: Settings, detection: TurnDetection) -> TurnTaking:
    complete, default, incomplete = base.end_silence_complete_ms, base.end_silence_ms, base.end_silence_incomplete_ms
    telling = base.end_silence_telling_ms
    decision, cut_in_cost = base.turn_decision, base.cut_in_cost
    if detection.mode == SEMANTIC_VAD:
        scale = EAGERNESS_SCALE[detection.eagerness]
        complete, default, incomplete, telling = (round(ms * scale) for ms in (complete, default, incomplete, telling))
        cut_in_cost *= scale  # an eager agent fears a cut-in less
    elif detection.silence_ms is not None:
        decision = "rules"  # the client chose a silence
        # The client's silence ends a turn whose words give no hint, and a telling
        # (server_vad is silence alone in the Realtime API); a complete sentence
        # never waits longer, a trailing "and" never shorter.
        default = telling = detection.silence_ms
        complete, incomplete = min(complete, default), max(incomplete, default)
    threshold = base.vad_threshold if detection.threshold is None else detection.threshold
    settings = dataclasses.replace(
        base,
        vad_threshold=threshold,
        end_silence_complete_ms=complete,
        end_silence_ms=default,
        end_silence_incomplete_ms=incomplete,
        end_silence_telling_ms=telling,
        turn_decision=decision,
        cut_in_cost=cut_in_cost,
        # An answer prepared in the pause is wasted when the client decides when to answer.
        preemptive_generation=base.preemptive_generation and detection.create_response,
    )
    preroll = PREROLL_SAMPLES
    if detection.prefix_padding_ms is not None:
        preroll = detection.prefix_padding_ms * PIPELINE_RATE // 1000
    in_effect = dataclasses.replace(
        detection,
        silence_ms=default if detection.mode == SERVER_VAD else None,
        prefix_padding_ms=preroll * 1000 // PIPELINE_RATE,
        threshold=threshold,
    )
    return TurnTaking(settings, preroll, detection.mode == MANUAL, in_effect)


def turn_detector(settings: Settings, habit: PauseHabit | None = None) -> TurnDetector:
    """The end-of-turn decision that ``settings`` ask for (also what experiments/turn_model/fit.py compares)."""
    return TurnDetector(
        settings.end_silence_complete_ms,
        settings.end_silence_ms,
        settings.end_silence_incomplete_ms,
        settings.max_turn_s,
        settings.end_silence_confident_ms,
        settings.end_silence_telling_ms,
        habit,
        settings.cut_in_cost if settings.turn_decision == "learned" else None,
        default_model() if settings.turn_decision == "learned" else None,
        settings.end_silence_told_ms,
    )
