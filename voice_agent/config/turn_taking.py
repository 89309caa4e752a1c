"""Turn-taking settings: the end of the user's turn, and the user speaking over the agent."""

from __future__ import annotations

from dataclasses import dataclass

from .option import option


@dataclass(frozen=True)
class TurnSettings:
    """Voice activity and turn detection: when a pause ends the user's turn."""

    vad_threshold: float = option(0.5, "Silero speech probability that counts as speech.", "turn")
    vad_min_speech_ms: int = option(96, "Speech needed before a user turn is considered started.", "turn")
    # The defaults favour latency: they answer into some mid-turn pauses, and the user hears it
    # (the held answer is ready when the turn commits). --end-silence-complete-ms 700
    # --end-silence-ms 1000 cut into none, at about 300 ms more delay: use them where being cut
    # off costs more than waiting (docs/turn-taking.md, "Why these defaults"; docs/results/endpointing.md).
    # docs/turn-taking.md, "The decision": the fitted model (turn_model.py) gives P(the turn has ended) at
    # each moment of a pause, and the turn ends once answering costs less than waiting; the rules are the
    # per-kind silences below, kept to compare against.
    turn_decision: str = option(
        "rules",
        "How a pause ends the turn: rules (a silence per kind of transcript: the --end-silence-* settings) or "
        "learned (the fitted end-of-turn model and --cut-in-cost; held out, it cuts into more paused turns than "
        "the rules, and it answers 'We will arrive at around 730.' later, see docs/results/endpointing.md).",
        "turn",
        ("learned", "rules"),
    )
    # Eight: 4 is the knee on pauses held out of the fit, but in the endpointing eval it cuts into
    # real speakers' pauses that 8 waits through (docs/results/endpointing.md).
    cut_in_cost: float = option(
        8.0,
        "How many waits a cut-in costs: the learned decision answers once the chance that the user is done "
        "exceeds cost / (cost + 1). Higher waits longer and cuts in less.",
        "turn",
    )
    end_silence_complete_ms: int = option(350, "Silence that ends a turn after a complete sentence.", "turn")
    end_silence_ms: int = option(600, "Silence that ends a turn when the transcript gives no hint.", "turn")
    # Two seconds: speakers pause well over a second after "my" or "at" while they find the next
    # word (docs/turn-taking.md); a turn that really ends on such a word is rare.
    end_silence_incomplete_ms: int = option(
        2000,
        "Silence that ends a turn after a trailing conjunction, article, filler or number, "
        'or a phrase like "let me see"; with --turn-decision learned, the longest any pause waits.',
        "turn",
    )
    # Two minutes: a caller explaining a problem talks past 30 s (docs/results/endpointing.md), and a
    # turn at this length is committed at its next gap between words, however it goes on. It bounds
    # the audio a session keeps: 7.7 MB at 16 kHz.
    max_turn_s: float = option(120.0, "A turn longer than this is committed at once.", "turn")
    # docs/turn-taking.md, "The decision": a question the LLM calls finished
    # (end-of-turn logprob >= -1.2) is what the benchmark's questions are, and
    # what none of the real meeting turns' mid-turn pauses was.
    end_silence_confident_ms: int = option(
        200,
        "Silence that ends a turn when the signals agree it is over: a question the LLM calls "
        "finished, or a whole answer to what the agent asked (a full phone number, yes to a yes/no question).",
        "turn",
    )
    # Real speakers go on after a finished telling: in the real group of the
    # endpointing eval every long thinking pause (up to 2.1 s) followed one, and
    # none followed a request (docs/turn-taking.md, "Why these defaults"). Questions,
    # requests, goodbyes and answers to the agent's questions are not tellings, and
    # a telling that every signal closes waits end_silence_told_ms (turn.told_in_full).
    end_silence_telling_ms: int = option(
        2000,
        "Silence that ends a turn after a complete sentence that tells (not a question, a request, "
        "a goodbye or an answer to what the agent asked) and that some signal leaves open: a speaker "
        "may go on after it.",
        "turn",
    )
    # The meeting turns of the endpointing eval pause up to 1.9 s after tellings that
    # every signal closes ("Okay, well I think we're ready to begin.", the LLM at
    # -1.4): shorter, and the real group's cut-ins rise (docs/results/endpointing.md).
    # On a phone call such a statement usually ends the turn: 350 answers it at once.
    end_silence_told_ms: int = option(
        2000,
        "Silence that ends a turn after a telling told in full: Whisper's full stop, a last word that leaves "
        "nothing open, and an LLM that calls it finished; never longer than --end-silence-telling-ms, and "
        "the user's pause habit does not lengthen it.",
        "turn",
    )
    end_of_turn_llm: int = option(
        1,
        "1: ask the LLM how likely the user's words so far end their turn (llama.cpp only; "
        "others give no answer) and weigh it in the end-of-turn decision; 0: do not ask.",
        "turn",
        (0, 1),
    )
    smart_turn_model: str = option(
        "",
        "Path to a Smart Turn v3.2 ONNX file (smart-turn-v3.2-cpu.onnx, in the pipecat-ai wheel): "
        "an audio end-of-turn model weighed in the decision. Empty: not used.",
        "turn",
    )
    # A speaker who was only pausing resumes within about half a second of the agent's voice (the
    # agent starts 550 to 650 ms into a pause after a statement). Longer, and a listener's "mm-hm"
    # or a cough pauses the agent until its words are checked (docs/results/bargein.md).
    reply_grace_ms: int = option(
        700,
        "After the agent starts answering, this long: if the user goes on speaking, the answer is "
        "withdrawn at once (not kept in the history) and both parts become one user turn. 0: off.",
        "turn",
    )


@dataclass(frozen=True)
class BargeInSettings:
    """The user speaking over the agent, and the input audio's echo and noise."""

    # The agent falls silent early and decides later: Whisper needs about 250 ms of speech to
    # tell "uh-huh" from words (--barge-in-check-ms), but silence can start before the words are
    # known. 96: as soon as the speech makes a turn (--vad-min-speech-ms). The stop time is
    # Silero's onset, this, and the --output-lead-ms the client still plays (docs/results/bargein.md).
    barge_in_min_speech_ms: int = option(
        96, "User speech over the agent after which the agent pauses: it may be an interruption.", "turn"
    )
    barge_in_check_ms: int = option(
        250,
        "User speech over the agent after which its words are checked; a paused agent "
        "resumes if they are only backchannels, or if the speech ends before this.",
        "turn",
    )
    # Fillers too: alone, "uh" is what Whisper makes of a short "uh-huh"; a user who
    # goes on is checked again every 160 ms of speech, and stopped at --barge-in-force-ms.
    # "Thank you" alone over an answer thanks it; it is also what Whisper reads into a
    # door slam over the agent's echo (docs/results/bargein.md).
    barge_in_backchannels: tuple[str, ...] = option(
        tuple(
            "yeah,yes,yep,yup,mm,mmm,mhm,mhmm,mmhmm,mm hm,mm hmm,hm,hmm,uh huh,okay,ok,right,sure,i see,got it,"
            "cool,nice,wow,oh,ah,uh,um,er,thank you,thanks".split(",")
        ),
        "Comma-separated words that do not interrupt the agent when they are all the user said "
        "over it (checked with STT). Empty: any speech past --barge-in-min-speech-ms interrupts.",
        "turn",
    )
    barge_in_force_ms: int = option(900, "User speech over the agent that interrupts it whatever the words.", "turn")
    barge_in_ignore_echo: int = option(
        1,
        "1: speech over the agent whose words match what the agent was saying at that moment is its "
        "own voice coming back (a speakerphone), not an interruption; 0: treat it as the user.",
        "turn",
        (0, 1),
    )
    # Off by default: AEC3 takes about 2 s to find each echo path, and on the barge-in eval's echo rig the
    # agent stopped for its own voice more often with it than with the echo test alone (docs/results/bargein.md).
    # auto costs about 1% of a core per session and passes an input without echo unchanged; a client that
    # cancels echo itself is left alone.
    echo_cancellation: str = option(
        "off",
        "Cancel the agent's own voice in the input (WebRTC's AEC3) before the VAD and STT hear it. auto: in every "
        "session but one whose client says in its start that its input is echo-cancelled already "
        "(docs/protocol.md); on: in every session.",
        "turn",
        ("auto", "on", "off"),
    )
    noise_suppression: int = option(
        0,
        "1: WebRTC's noise suppression on the input, before the VAD and STT hear it. A Realtime client's "
        "noise_reduction turns it on or off for its own session.",
        "turn",
        (0, 1),
    )
