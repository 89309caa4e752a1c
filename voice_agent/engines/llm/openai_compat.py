"""Any OpenAI-compatible Chat Completions endpoint, streamed over HTTP.

This is how a gateway reaches an LLM it does not host: ``vllm serve`` (one
GPU, or many through vLLM's tensor/pipeline parallelism and Ray), llama.cpp's
server, or a hosted API. One pooled ``httpx.AsyncClient`` serves every
session. Aborting is closing the response: the server sees the connection
drop and stops generating (vLLM aborts the request).

Failures before the first token (refused connection, timeout, 5xx, 429) are
retried a bounded number of times; after that, and for any failure once text
has streamed, the stream raises :class:`LLMError` and the session turns it
into an ``error`` event.

Tools: given ``tools``, the request carries them and the streamed
``tool_calls`` deltas (an id and name first, the JSON arguments in pieces,
several calls told apart by ``index``) are assembled into :class:`ToolCall`
items, yielded once the stream ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncGenerator
from typing import Any, overload

import httpx

from .base import Message, ToolCall
from .markup import chat_markup

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
RETRY_BACKOFF_S = 0.25


class LLMError(Exception):
    """The endpoint failed or answered something that is not a chat stream."""


def decode_event(line: str) -> str | None:
    """The text delta in one server-sent-events line of a chat completion stream.

    Returns ``None`` for lines that carry no text (comments, role-only deltas,
    the final ``[DONE]``); raises :class:`LLMError` for an error event.
    """
    delta = decode_delta(line)
    content = delta.get("content") if delta else None
    return content if isinstance(content, str) and content else None


def decode_delta(line: str) -> dict[str, Any] | None:
    """The ``delta`` object of one server-sent-events line, or ``None`` for a line without one."""
    if not line.startswith("data:"):
        return None  # blank separators, ": keep-alive" comments, event names
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        raise LLMError(f"the endpoint sent an event that is not JSON: {data[:200]!r}") from None
    if not isinstance(event, dict):
        raise LLMError(f"the endpoint sent an unexpected event: {data[:200]!r}")
    if "error" in event:
        raise LLMError(f"the endpoint reported an error: {_error_text(event['error'])}")
    choices = event.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return None  # e.g. a usage-only event
    delta = choices[0].get("delta")
    return delta if isinstance(delta, dict) else None


class ToolCallAssembler:
    """Joins the streamed pieces of the tool calls in one answer."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}

    def add(self, pieces: Any) -> None:
        if not isinstance(pieces, list):
            raise LLMError(f"the endpoint sent tool_calls that are not a list: {pieces!r:.200}")
        for piece in pieces:
            if not isinstance(piece, dict):
                raise LLMError(f"the endpoint sent a tool call that is not an object: {piece!r:.200}")
            index = piece.get("index")
            if not isinstance(index, int):
                # Without an index, a piece with an id starts a call and one without goes on with the last.
                index = len(self._calls) if piece.get("id") or not self._calls else max(self._calls)
            call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            if isinstance(piece.get("id"), str):
                call["id"] = piece["id"]
            function = piece.get("function") or {}
            if isinstance(function, dict):
                if isinstance(function.get("name"), str):
                    call["name"] += function["name"]
                if isinstance(function.get("arguments"), str):
                    call["arguments"] += function["arguments"]

    def calls(self) -> list[ToolCall]:
        """The calls in the order the model made them; a call without an id gets one."""
        return [
            ToolCall(call["id"] or f"call_{index}", call["name"], call["arguments"] or "{}")
            for index, call in sorted(self._calls.items())
            if call["name"]
        ]


def _error_text(error: object) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


class OpenAICompatBackend:
    name = "openai"
    supports_tools = True

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "",
        api_key_env: str = "OPENAI_API_KEY",
        max_tokens: int = 120,
        temperature: float = 0.3,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        timeout_s: float = 10.0,
        retries: int = 2,
        tool_choice: str | dict[str, Any] | None = None,
    ):
        if not base_url:
            raise ValueError("--llm openai needs --llm-url, e.g. http://127.0.0.1:8000/v1")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"--llm-url {base_url!r} must start with http:// or https://")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.repeat_penalty = repeat_penalty
        self.frequency_penalty = frequency_penalty
        self.presence_penalty = presence_penalty
        self.retries = retries
        # Sent with the tools: None leaves it to the server ("auto"); a named function forces that call.
        self.tool_choice = tool_choice
        headers = {}
        api_key = os.environ.get(api_key_env, "") if api_key_env else ""
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # The read timeout bounds the wait for each piece of the stream, so a
        # stalled server fails the reply instead of hanging the session.
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
        )

    @overload
    def stream_chat(self, messages: list[Message]) -> AsyncGenerator[str, None]: ...

    @overload
    def stream_chat(
        self, messages: list[Message], tools: list[dict[str, Any]] | None
    ) -> AsyncGenerator[str | ToolCall, None]: ...

    async def stream_chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> AsyncGenerator[str | ToolCall, None]:
        """``tool_choice``: this request's (a Realtime client's), instead of the server's."""
        if not self.model:
            self.model = await self._served_model()
        # The server renders the chat template and tokenizes it with special tokens parsed, as llama.cpp does.
        messages = chat_markup(self).screen_messages(messages)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "frequency_penalty": self.frequency_penalty,
            "presence_penalty": self.presence_penalty,
        }
        if self.repeat_penalty != 1.0:
            # vLLM's extension of the API (llama.cpp's repeat penalty); OpenAI's own
            # API rejects unknown fields, so it is sent only when it does something.
            body["repetition_penalty"] = self.repeat_penalty
        if tools:
            body["tools"] = tools
            choice = self.tool_choice if tool_choice is None else tool_choice
            if choice is not None:
                body["tool_choice"] = choice
        attempt = 0
        while True:
            streamed = False
            calls = ToolCallAssembler()
            try:
                async with self._client.stream("POST", "/chat/completions", json=body) as response:
                    await _raise_for_status(response)
                    async for line in response.aiter_lines():
                        delta = decode_delta(line)
                        if not delta:
                            continue
                        if delta.get("tool_calls"):
                            streamed = True
                            calls.add(delta["tool_calls"])
                        content = delta.get("content")
                        if isinstance(content, str) and content:
                            streamed = True
                            yield content
                for call in calls.calls():
                    yield call
                return
            except (httpx.TransportError, _RetryableStatus) as exc:
                # Once text has been spoken, a retry would repeat it: give up.
                if streamed or attempt >= self.retries:
                    raise LLMError(f"{self.base_url}: {_describe(exc)}") from exc
                attempt += 1
                log.warning("LLM request failed (%s); retry %d of %d", _describe(exc), attempt, self.retries)
                await asyncio.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))

    async def _served_model(self) -> str:
        """The first model the endpoint lists: ``vllm serve`` serves exactly one."""
        try:
            response = await self._client.get("/models")
            response.raise_for_status()
            return response.json()["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"{self.base_url}/models did not name a model ({_describe(exc)}); set --llm-model") from exc

    async def prefill(self, messages: list[Message]) -> None:
        """Nothing: an extra request per turn would cost every gateway's endpoint more than the server's own prefix cache saves."""

    async def end_of_turn_logprob(self, messages: list[Message], *, answering: bool = False) -> float | None:
        """None: chat completion endpoints return sampled tokens' logprobs, not the probability of a token that was not sampled after the user's words."""
        return None

    async def warm_up(self) -> None:
        # Checks the endpoint and model before the first user, and opens a pooled connection.
        async for _ in self.stream_chat([{"role": "user", "content": "Say hello."}]):
            pass
        log.info("LLM endpoint %s serves %s", self.base_url, self.model)

    async def close(self) -> None:
        await self._client.aclose()


class _RetryableStatus(Exception):
    pass


async def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    body = (await response.aread()).decode("utf-8", "replace")
    try:
        detail = _error_text(json.loads(body).get("error") or body)
    except (ValueError, AttributeError):
        detail = body
    message = f"HTTP {response.status_code}: {detail[:300]}"
    if response.status_code in RETRY_STATUSES:
        raise _RetryableStatus(message)
    raise LLMError(message)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
