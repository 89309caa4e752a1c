"""Barge-in figures for a sound played over the agent's answer: did the agent
stop, how soon, and did it stop for a sound it should have ignored?

Pure functions over what a replay client received (``measure``'s instants).
``voice-agent bench bargein`` runs them; ``docs/turn-taking.md`` explains the eval.

What the user hears is what counts: a client that plays the agent's frames
as they arrive and drops its queue at ``clear`` (``measure.playback_intervals``)
falls silent when the agent stops sending, even before any ``clear``: the
session pauses its answer while it checks the overlapping words, and resumes
it for an acknowledgement.
"""

from __future__ import annotations

from collections.abc import Sequence

from .measure import GLITCH_S, MessageIn, Received, bridged, distribution, playback_intervals

# After the probe ends, how long the agent may take to react: the barge-in
# check transcribes the probe, which takes a few hundred ms on a busy CPU.
SETTLE_S = 2.0


def probe_outcome(
    received: Sequence[Received], onset: float, end: float, settle_s: float = SETTLE_S, until: float | None = None
) -> dict:
    """What the agent did about a sound from ``onset`` to ``end`` (client instants).

    ``outcome`` is one of

    - ``not playing``: no answer was sounding at ``onset``; nothing to judge;
    - ``cleared``: a ``clear`` came before ``end + settle_s``, or later but before ``until`` (the next turn
      of the script): the agent gave up its answer. A sound over the agent can hold it paused until its
      turn ends, and then clear it, past ``end + settle_s``, when Whisper reads words into it;
    - ``paused``: it fell silent, and went on before the deadline without a ``clear``;
    - ``stopped``: it fell silent, and said nothing more before the deadline, without a ``clear``;
    - ``kept talking``: it never fell silent in that time.

    ``stop_ms`` is from ``onset`` to when the player fell silent (its queue
    ran dry, or was dropped at ``clear``); ``clear_ms`` to the ``clear``;
    ``silent_ms`` how long it stayed silent before going on (``paused`` only).
    """
    deadline = end + settle_s
    intervals = bridged(playback_intervals(received), GLITCH_S)
    playing = next((i for i, (start, stop) in enumerate(intervals) if start <= onset < stop), None)
    result: dict[str, str | float | None] = {
        "outcome": "not playing",
        "stop_ms": None,
        "clear_ms": None,
        "silent_ms": None,
    }
    if playing is None:
        return result
    clears_until = deadline if until is None else max(deadline, until)
    clear_at = next(
        (m.at for m in received if isinstance(m, MessageIn) and m.type == "clear" and onset <= m.at < clears_until),
        None,
    )
    silent_at = intervals[playing][1]
    if clear_at is not None:
        result["clear_ms"] = _ms(clear_at, onset)
    if silent_at >= deadline and clear_at is None:
        result["outcome"] = "kept talking"
        return result
    result["stop_ms"] = _ms(silent_at, onset)
    if clear_at is not None:
        result["outcome"] = "cleared"
    elif playing + 1 < len(intervals) and intervals[playing + 1][0] < deadline:
        result["outcome"] = "paused"
        result["silent_ms"] = _ms(intervals[playing + 1][0], silent_at)
    else:
        result["outcome"] = "stopped"
    return result


def summarise(probes: Sequence[dict]) -> dict:
    """Per kind of probe (``tag``): how often each outcome happened, and the stop times.

    An interruption should end ``cleared``; a noise or an acknowledgement
    should not. Stop times are over the probes that were cleared.
    """
    summary = {}
    for tag in sorted({probe["tag"] for probe in probes}):
        group = [probe for probe in probes if probe["tag"] == tag]
        outcomes: dict[str, int] = {}
        for probe in group:
            outcomes[probe["outcome"]] = outcomes.get(probe["outcome"], 0) + 1
        cleared = [probe for probe in group if probe["outcome"] == "cleared"]
        summary[tag] = {
            "probes": len(group),
            "judged": sum(1 for probe in group if probe["outcome"] != "not playing"),
            "outcomes": outcomes,
            "stop_ms": distribution([probe["stop_ms"] for probe in cleared]),
            "clear_ms": distribution([probe["clear_ms"] for probe in cleared]),
        }
    return summary


def _ms(at: float, since: float) -> float:
    return round((at - since) * 1000.0, 1)
