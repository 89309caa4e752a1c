"""Call control: the end_call and transfer_call tools, and the Twilio REST requests that carry them out."""

from __future__ import annotations

import json

import pytest

from tests.twilio_rest import TwilioRestServer
from voice_agent.agent.agent import Agent, CallContext
from voice_agent.agent.call_control import TwilioCalls, TwilioCredentialsMissing, end_call, transfer_call
from voice_agent.agent.dial_targets import InvalidTransferTarget, checked_transfer_target
from voice_agent.agent.tools import run_tool

ACCOUNT = "AC" + "1" * 32
ENV = {"TWILIO_ACCOUNT_SID": ACCOUNT, "TWILIO_AUTH_TOKEN": "secret-token"}


CALL = "CA" + "2" * 32


async def test_hang_up_posts_status_completed_with_basic_auth():
    with TwilioRestServer() as twilio:
        await TwilioCalls(twilio.url, ENV).hang_up(CALL)
    assert twilio.requests == [
        {
            "path": f"/2010-04-01/Accounts/{ACCOUNT}/Calls/{CALL}.json",
            "content_type": "application/x-www-form-urlencoded",
            "form": {"Status": "completed"},
            "auth": ("Basic", ACCOUNT, "secret-token"),
        }
    ]


async def test_transfer_posts_twiml_dial_and_an_api_key_is_preferred():
    env = {**ENV, "TWILIO_API_KEY": "SK1", "TWILIO_API_SECRET": "key-secret"}
    with TwilioRestServer() as twilio:
        await TwilioCalls(twilio.url + "/", env).transfer(CALL, "+15551234567")
    request = twilio.requests[0]
    assert request["path"] == f"/2010-04-01/Accounts/{ACCOUNT}/Calls/{CALL}.json"
    assert request["form"] == {"Twiml": "<Response><Dial>+15551234567</Dial></Response>"}
    assert request["auth"] == ("Basic", "SK1", "key-secret")


async def test_missing_credentials_are_named():
    with pytest.raises(TwilioCredentialsMissing, match="TWILIO_ACCOUNT_SID"):
        await TwilioCalls("http://127.0.0.1:9", {}).hang_up(CALL)


async def test_the_tools_ask_for_the_action_and_transfer_only_to_named_destinations():
    context = Agent().context("s", "ws", {}, None)
    outcome = await run_tool(end_call, '{"reason": "caller said bye"}', context, 1)
    assert outcome.ok and "goodbye" in outcome.content.lower()
    assert (context.action.kind, context.action.reason) == ("end", "caller said bye")

    transfer = transfer_call({"front desk": "+15550001111", "manager": "sip:boss@example.com"})
    assert transfer.schema()["function"]["parameters"]["properties"]["to"]["enum"] == ["front desk", "manager"]
    outcome = await run_tool(transfer, '{"to": "manager"}', context, 1)
    assert outcome.ok and (context.action.kind, context.action.to) == ("transfer", "sip:boss@example.com")
    outcome = await run_tool(transfer, '{"to": "+19005550000"}', context, 1)
    assert not outcome.ok and "not one of" in json.loads(outcome.content)["error"]
    assert context.action.to == "sip:boss@example.com"


@pytest.mark.parametrize(
    "call_sid",
    [
        "CA1/../../../AC" + "9" * 32 + "/Calls/CA" + "f" * 32 + ".json?x=",
        "CA1",
        "CA" + "F" * 32,
        "",
        "../CA" + "2" * 32,
    ],
)
async def test_a_malformed_call_sid_sends_no_request(call_sid):
    with TwilioRestServer() as twilio:
        with pytest.raises(ValueError, match="call SID"):
            await TwilioCalls(twilio.url, ENV).hang_up(call_sid)
    assert twilio.requests == []


async def test_path_segments_are_percent_encoded():
    with TwilioRestServer() as twilio:
        await TwilioCalls(twilio.url, {**ENV, "TWILIO_ACCOUNT_SID": "AC1/../x?y"}).hang_up(CALL)
    assert twilio.requests[0]["path"] == f"/2010-04-01/Accounts/AC1%2F..%2Fx%3Fy/Calls/{CALL}.json"


async def test_a_sip_target_is_dialled_as_sip():
    with TwilioRestServer() as twilio:
        await TwilioCalls(twilio.url, ENV).transfer(CALL, "sip:desk@pbx.example.com:5060")
    assert twilio.requests[0]["form"] == {
        "Twiml": "<Response><Dial><Sip>sip:desk@pbx.example.com:5060</Sip></Dial></Response>"
    }


@pytest.mark.parametrize(
    "target", ["+15551234567", "+442071838750", "sip:desk@pbx.example.com", "sips:a.b-c@10.0.0.1:5061"]
)
def test_transfer_targets_that_are_e164_or_sip_pass(target):
    assert checked_transfer_target(target) == target


@pytest.mark.parametrize(
    "target",
    [
        "15551234567",  # no +
        "+05551234567",  # no country code starts with 0
        "+1234567890123456",  # 16 digits
        "+1 555 123 4567",
        "+15551234567</Dial><Dial>+19005550000",
        "sip:desk@pbx.example.com?X-Header=1",
        "sip:desk@pbx.example.com;transport=tcp",
        "sip:@pbx.example.com",
        "sip:desk",
        "tel:+15551234567",
        "https://evil.example/twiml",
        "sip:a b@host",
        "",
    ],
)
def test_other_transfer_targets_are_refused(target):
    with pytest.raises(InvalidTransferTarget, match="E.164"):
        checked_transfer_target(target)


async def test_a_bad_target_is_refused_when_the_agent_is_built_and_when_a_tool_asks_for_it():
    with pytest.raises(ValueError, match="E.164"):
        transfer_call({"desk": "5551234"})
    context = Agent().context("s", "twilio", {}, None)
    with pytest.raises(InvalidTransferTarget):
        context.transfer_call("+1555<Play>x</Play>")
    assert context.action is None

    from voice_agent.agent.tools import tool

    @tool
    def transfer_to_number(context: CallContext, number: str) -> str:
        """Transfer to a number the caller gave.

        Args:
            number: The number.
        """
        context.transfer_call(number)
        return "ok"

    outcome = await run_tool(transfer_to_number, '{"number": "911; sip:x@y"}', context, 1)
    assert not outcome.ok and "E.164" in json.loads(outcome.content)["error"]
    assert context.action is None
    with TwilioRestServer() as twilio:
        with pytest.raises(InvalidTransferTarget):
            await TwilioCalls(twilio.url, ENV).transfer(CALL, "+1555<Hangup/>")
    assert twilio.requests == []
