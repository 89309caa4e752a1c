"""Functions a Realtime client runs itself, in a session with fake engines: offered, handed over, answered."""

from __future__ import annotations

import asyncio
import json

from tests.test_session import Harness
from voice_agent.agent.agent import Agent
from voice_agent.agent.agent_session import AgentSession
from voice_agent.agent.client_tools import UNANSWERED, WAITING
from voice_agent.engines.llm.base import ToolCall
from voice_agent.protocols.events import (
    AgentAudio,
    Error,
    FunctionCall,
    FunctionCallOutput,
    FunctionOutputAdded,
    ItemDelete,
    ItemDeleted,
    ResponseEnded,
    ResponseRequest,
    SessionConfig,
    SessionUpdate,
    TextReceived,
    Transcript,
    UserText,
)
from voice_agent.session import Session

WEATHER = (
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
)


class ToolCallingLLM:
    """Calls get_weather when offered it and the last message is the user's; talks about a tool result."""

    name = "tool-calling"
    supports_tools = True

    def __init__(self, calls: int = 1) -> None:
        self.calls = calls
        self.requests: list[dict] = []

    async def stream_chat(self, messages, tools=None, tool_choice=None):
        self.requests.append({"messages": [dict(m) for m in messages], "tools": tools, "tool_choice": tool_choice})
        last = messages[-1]
        if last["role"] == "tool":
            for word in f"The weather is {json.loads(last['content']).get('sky', 'unknown')} today.".split():
                await asyncio.sleep(0.005)
                yield word + " "
        elif tools and last["role"] == "user":
            await asyncio.sleep(0.005)
            for i in range(self.calls):
                yield ToolCall(f"call_{len(self.requests)}_{i}", "get_weather", json.dumps({"city": f"Paris{i}"}))
        else:
            yield "Hello there. "

    async def prefill(self, messages):
        pass

    async def end_of_turn_logprob(self, messages, *, answering=False):
        return None

    async def warm_up(self):
        pass

    async def close(self):
        pass


def tool_harness(llm=None, agent: Agent | None = None, **settings) -> Harness:
    h = Harness(**settings)
    h.llm = llm or ToolCallingLLM()
    h.session.engines.llm = h.llm
    if agent is not None:  # a session of a server-side agent, built as the connection builds it
        agent_session = AgentSession(agent, h.settings, "test", h.events.append, h.llm, "realtime")
        h.session = Session(h.session.engines, h.settings, h.events.append, "test", agent=agent_session)
    return h


async def test_a_call_is_handed_to_the_client_and_its_output_answered():
    h = tool_harness()
    h.session.handle(SessionUpdate("u", tools=WEATHER, tool_choice="auto"))
    (config,) = h.of(SessionConfig)
    assert config.tools == WEATHER and config.tool_choice == "auto"
    h.session.handle(UserText("What's the weather in Paris?"))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    (call,) = h.of(FunctionCall)
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris0"})
    assert h.of(ResponseEnded)[0].status == "completed"
    assert not h.of(AgentAudio)  # a call alone: no "Sorry, I don't have a good answer" said instead
    assert h.events.index(call) < h.events.index(h.of(ResponseEnded)[0])
    assert h.llm.requests[0]["tools"] == list(WEATHER) and h.llm.requests[0]["tool_choice"] == "auto"
    assert h.session.history[-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [ToolCall(call.call_id, "get_weather", call.arguments).as_message_part()],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": WAITING},
    ]
    h.session.handle(FunctionCallOutput(call.call_id, '{"sky": "sunny"}', "o", "item_out"))
    assert h.of(FunctionOutputAdded) == [FunctionOutputAdded(call.call_id, '{"sky": "sunny"}', "item_out")]
    assert h.session.control.calls.continuing  # the next request goes on with the answer, not a new text turn
    h.session.handle(ResponseRequest())
    await h.until(lambda: len(h.of(ResponseEnded)) == 2)
    assert h.finals("agent")[-1] == "The weather is sunny today."
    assert h.llm.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call.call_id,
        "content": '{"sky": "sunny"}',
    }
    assert h.of(AgentAudio)
    # An output for a call that has one is refused.
    h.session.handle(FunctionCallOutput(call.call_id, "{}", "again"))
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("function_call_not_pending", "again")]
    await h.session.close()


async def test_several_calls_in_one_response():
    h = tool_harness(ToolCallingLLM(calls=2))
    h.session.handle(SessionUpdate(tools=WEATHER))
    h.session.handle(UserText("Weather in two cities?"))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    assert [json.loads(c.arguments)["city"] for c in h.of(FunctionCall)] == ["Paris0", "Paris1"]
    assert [m["role"] for m in h.session.history] == ["user", "assistant", "tool", "tool"]
    await h.session.close()


async def test_a_call_the_conversation_leaves_behind_is_closed_and_its_late_output_refused():
    h = tool_harness()
    h.session.handle(SessionUpdate(tools=WEATHER))
    h.session.handle(UserText("What's the weather?"))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    (call,) = h.of(FunctionCall)
    h.session.handle(TextReceived("Never mind, hello."))  # the user goes on before the output came
    await h.until(lambda: len(h.of(ResponseEnded)) == 2)
    request = h.llm.requests[-1]["messages"]
    # Every call in the prompt has its result: a valid chat for the LLM.
    assert request[-3:-1] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [ToolCall(call.call_id, "get_weather", call.arguments).as_message_part()],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": UNANSWERED},
    ]
    h.session.handle(FunctionCallOutput(call.call_id, '{"sky": "grey"}', "late"))
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("function_call_not_pending", "late")]
    assert not h.of(FunctionOutputAdded)
    await h.session.close()


async def test_an_embedded_model_that_cannot_call_tools_says_so_and_answers_without_them():
    h = Harness()  # the fake LLM has no supports_tools, as the embedded SmolLM2
    h.session.handle(SessionUpdate("u", tools=WEATHER))
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("tools_unsupported", "u")]
    assert h.of(SessionConfig)[-1].tools == WEATHER  # declared, and reported back
    h.session.handle(UserText("Weather?"))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.finals("agent"))
    assert not h.of(FunctionCall)
    await h.session.close()


async def test_tool_choice_and_tools_for_one_response():
    h = tool_harness()
    h.session.handle(SessionUpdate("bad", tool_choice={"type": "function", "function": {"name": "nope"}}))
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("invalid_value", "bad")]
    h.session.handle(UserText("Weather?"))
    h.session.handle(ResponseRequest(tools=WEATHER, tool_choice="required"))
    await h.until(lambda: h.of(ResponseEnded))
    assert h.llm.requests[0]["tools"] == list(WEATHER) and h.llm.requests[0]["tool_choice"] == "required"
    h.session.handle(FunctionCallOutput(h.of(FunctionCall)[0].call_id, '{"sky": "clear"}'))
    h.session.handle(UserText("And now?"))
    h.session.handle(ResponseRequest())  # the session has no tools: this answer is offered none
    await h.until(lambda: len(h.of(ResponseEnded)) == 2)
    assert h.llm.requests[1]["tools"] is None and h.finals("agent")[-1] == "Hello there."
    await h.session.close()


def agent_with_a_clock() -> tuple[Agent, list[str]]:
    ran: list[str] = []

    def current_time() -> str:
        """The time now."""
        ran.append("current_time")
        return "noon"

    return Agent(instructions="Help.", tools=[current_time]), ran


async def test_an_agents_tools_run_on_the_server_and_the_clients_go_to_the_client():
    agent, ran = agent_with_a_clock()
    clock = ToolCall("call_clock", "current_time", "{}")
    weather = ToolCall("call_weather", "get_weather", '{"city": "Oslo"}')

    class BothLLM(ToolCallingLLM):
        async def stream_chat(self, messages, tools=None, tool_choice=None):
            self.requests.append({"messages": [dict(m) for m in messages], "tools": tools})
            if messages[-1]["role"] == "user":
                yield clock
                yield weather
            else:
                yield "Done. "

    h = tool_harness(BothLLM(), agent=agent)
    h.session.handle(SessionUpdate(tools=({**WEATHER[0], "function": {"name": "current_time"}},)))
    assert [e.code for e in h.of(Error)] == ["tool_name_conflict"]  # the agent's own tool has that name
    assert h.of(SessionConfig)[-1].tools == ()
    h.session.handle(SessionUpdate(tools=WEATHER))
    h.session.handle(UserText("Time and weather?"))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    offered = {t["function"]["name"] for t in h.llm.requests[0]["tools"]}
    assert offered == {"current_time", "get_weather"}
    assert ran == ["current_time"]  # on the server
    assert [c.call_id for c in h.of(FunctionCall)] == ["call_weather"]  # to the client
    roles = [(m["role"], m.get("tool_call_id")) for m in h.session.history]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_clock"),
        ("assistant", None),
        ("tool", "call_weather"),
    ]
    await h.session.close()


async def test_a_call_made_while_the_answer_is_interrupted_is_never_handed_over():
    class TalkThenCall(ToolCallingLLM):
        async def stream_chat(self, messages, tools=None, tool_choice=None):
            self.requests.append({"messages": messages, "tools": tools})
            for i in range(30):
                await asyncio.sleep(0.005)
                yield f"w{i}. "
            yield ToolCall("call_x", "get_weather", "{}")

    h = tool_harness(TalkThenCall())
    h.session.handle(SessionUpdate(tools=WEATHER))
    h.session.handle(UserText("Talk."))
    h.session.handle(ResponseRequest())
    await h.until(lambda: len(h.of(AgentAudio)) > 5)
    h.session.handle(TextReceived("Stop."))
    await h.until(lambda: len(h.of(ResponseEnded)) >= 1)
    await asyncio.sleep(0.3)
    assert not [c for c in h.of(FunctionCall) if h.of(ResponseEnded)[0].response == c.response]
    assert all(not m.get("tool_calls") for m in h.session.history[:2])
    assert any(isinstance(e, Transcript) and e.role == "agent" for e in h.events)
    await h.session.close()


async def test_deleting_an_answer_that_called_a_function_takes_its_results_too():
    h = tool_harness()
    h.session.handle(SessionUpdate(tools=WEATHER))
    h.session.handle(UserText("What's the weather?"))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    (call,) = h.of(FunctionCall)
    h.session.handle(ItemDelete("item_answer", "d", response=call.response))
    assert h.of(ItemDeleted) == [ItemDeleted("item_answer")]
    assert h.session.history == [{"role": "user", "content": "What's the weather?"}]  # a valid chat still
    h.session.handle(FunctionCallOutput(call.call_id, "{}", "late"))
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("function_call_not_pending", "late")]
    await h.session.close()
