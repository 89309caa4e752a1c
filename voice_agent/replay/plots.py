"""PNG pictures of a replay: a timeline per run and a latency histogram.

Server stages are placed on the client's time axis by anchoring the server's
end of speech at the client's (see :func:`measure.server_stages`); on
loopback the two differ by the transport delay of one frame.
"""

from __future__ import annotations

from pathlib import Path

from .measure import server_stages

# Stage name, label, colour, marker: in the order they happen.
STAGES = (
    ("endpoint", "endpoint (server)", "tab:purple", "|"),
    ("stt_final", "STT final (server)", "tab:blue", "o"),
    ("llm_first_token", "LLM first token (server)", "tab:orange", "s"),
    ("first_tts_audio", "first TTS audio (server)", "tab:red", "D"),
)
USER_COLOUR = "tab:green"
AGENT_COLOUR = "tab:gray"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never a window
    import matplotlib.pyplot as plt

    return plt


def timeline(run: dict, path: Path) -> None:
    """Top: the whole run on one time axis. Bottom: each turn aligned at the end of user speech."""
    plt = _pyplot()
    turns = run["turns"]
    figure, (whole, aligned) = plt.subplots(
        2, 1, figsize=(13, 3.2 + 0.45 * max(len(turns), 1)), gridspec_kw={"height_ratios": [2, max(len(turns), 2)]}
    )
    figure.suptitle(
        f"replay timeline: {run['concurrency']} concurrent session(s), session {run['session'] + 1}, "
        f"repeat {run['repeat'] + 1}"
    )

    # The whole run: who is speaking when, and where each server stage fell.
    for turn in turns:
        if turn["speech_start_s"] is None:
            continue
        whole.broken_barh(
            [(turn["speech_start_s"], turn["speech_end_s"] - turn["speech_start_s"])], (1.6, 0.8), color=USER_COLOUR
        )
        whole.text(turn["speech_start_s"], 2.5, f"{turn['index'] + 1}", fontsize=8, va="bottom")
        for name, _, colour, marker in STAGES:
            offset = server_stages(turn["server"] or {}).get(name)
            if offset is not None:
                whole.plot(
                    turn["speech_end_s"] + offset / 1000,
                    1.0,
                    marker=marker,
                    color=colour,
                    markersize=5,
                    linestyle="none",
                )
    speech = [(a, b - a) for a, b in run["agent_speech_s"]]
    whole.broken_barh(speech, (-0.4, 0.8), color=AGENT_COLOUR)
    whole.set_yticks([0, 1, 2], ["agent speech", "server stages", "user speech"])
    whole.set_ylim(-0.8, 3.0)
    whole.set_xlabel("seconds since the session started")
    whole.grid(axis="x", alpha=0.3)

    # Per turn, aligned at the end of user speech: the latency story.
    for row, turn in enumerate(turns):
        y = len(turns) - 1 - row
        if turn["speech_end_s"] is None:
            continue
        speech_ms = (turn["speech_end_s"] - turn["speech_start_s"]) * 1000
        aligned.broken_barh([(-speech_ms, speech_ms)], (y - 0.3, 0.6), color=USER_COLOUR, alpha=0.6)
        for name, _, colour, marker in STAGES:
            offset = server_stages(turn["server"] or {}).get(name)
            if offset is not None:
                aligned.plot(offset, y, marker=marker, color=colour, markersize=7, linestyle="none")
        for start, end in run["agent_speech_s"]:
            if end > turn["speech_end_s"] and (turn["answer_s"] is None or start >= turn["answer_s"] - 0.5):
                aligned.broken_barh(
                    [((start - turn["speech_end_s"]) * 1000, (end - start) * 1000)],
                    (y - 0.3, 0.6),
                    color=AGENT_COLOUR,
                    alpha=0.6,
                )
                break
        v2v = turn["voice_to_voice_ms"]
        if v2v is not None:
            aligned.plot(v2v, y, marker="v", color="black", markersize=8, linestyle="none")
            aligned.text(v2v + 60, y + 0.15, f"{v2v:.0f} ms", fontsize=8)
    aligned.axvline(0, color="black", linewidth=0.8)
    aligned.set_yticks(range(len(turns)), [f"{t['index'] + 1}. {t['name'][:22]}" for t in reversed(turns)], fontsize=8)
    aligned.set_xlim(-1500, max([3000] + [t["voice_to_voice_ms"] + 1000 for t in turns if t["voice_to_voice_ms"]]))
    aligned.set_xlabel("ms after the end of user speech (client clock); black triangle: first agent audio heard")
    aligned.grid(axis="x", alpha=0.3)
    handles = [
        plt.Line2D([], [], color=USER_COLOUR, linewidth=6, label="user speech"),
        plt.Line2D([], [], color=AGENT_COLOUR, linewidth=6, label="agent speech"),
        *(plt.Line2D([], [], color=c, marker=m, linestyle="none", label=label) for _, label, c, m in STAGES),
        plt.Line2D([], [], color="black", marker="v", linestyle="none", label="first agent audio (client)"),
    ]
    aligned.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35 if len(turns) < 4 else -0.12),
        ncol=4,
        fontsize=8,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def histogram(runs: list[dict], path: Path) -> None:
    """Client voice-to-voice latency per concurrency level, with the server's figure beside it."""
    plt = _pyplot()
    levels = sorted({run["concurrency"] for run in runs})
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for axis, key, title in (
        (axes[0], "voice_to_voice_ms", "voice-to-voice, client"),
        (axes[1], "server_voice_to_voice_ms", "voice-to-voice, server metrics"),
    ):
        values = {
            level: [t[key] for r in runs if r["concurrency"] == level for t in r["turns"] if t[key] is not None]
            for level in levels
        }
        everything = [v for vs in values.values() for v in vs]
        if not everything:
            axis.text(0.5, 0.5, "no answers", ha="center", transform=axis.transAxes)
            continue
        bins = _bins(min(everything), max(everything))
        for level in levels:
            if values[level]:
                axis.hist(
                    values[level],
                    bins=bins,
                    histtype="step",
                    linewidth=2,
                    label=f"{level} session(s), n={len(values[level])}",
                )
        axis.set_title(title)
        axis.set_xlabel("ms")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    axes[0].set_ylabel("turns")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _bins(low: float, high: float) -> list[float]:
    step = 50.0 if high - low <= 1500 else 100.0 if high - low <= 4000 else 250.0
    start = step * (low // step)
    return [start + step * i for i in range(int((high - start) // step) + 2)]
