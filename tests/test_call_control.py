"""Call control: the end_call and transfer_call tools, and the Twilio REST requests that carry them out."""

from __future__ import annotations

import json

import pytest

from tests.twilio_rest import TwilioRestServer
from voice_agent.agent import Agent
from voice_agent.call_control import TwilioCalls, TwilioCredentialsMissing, end_call, transfer_call
from voice_agent.tools import run_tool

ACCOUNT = "AC" + "1" * 32
ENV = {"TWILIO_ACCOUNT_SID": ACCOUNT, "TWILIO_AUTH_TOKEN": "secret-token"}


async def test_hang_up_posts_status_completed_with_basic_auth():
    with TwilioRestServer() as twilio:
        await TwilioCalls(twilio.url, ENV).hang_up("CA123")
    assert twilio.requests == [
        {
            "path": f"/2010-04-01/Accounts/{ACCOUNT}/Calls/CA123.json",
            "content_type": "application/x-www-form-urlencoded",
            "form": {"Status": "completed"},
            "auth": ("Basic", ACCOUNT, "secret-token"),
        }
    ]


async def test_transfer_posts_twiml_dial_and_an_api_key_is_preferred():
    env = {**ENV, "TWILIO_API_KEY": "SK1", "TWILIO_API_SECRET": "key-secret"}
    with TwilioRestServer() as twilio:
        await TwilioCalls(twilio.url + "/", env).transfer("CA9", "+15551234567")
    request = twilio.requests[0]
    assert request["path"] == f"/2010-04-01/Accounts/{ACCOUNT}/Calls/CA9.json"
    assert request["form"] == {"Twiml": "<Response><Dial>+15551234567</Dial></Response>"}
    assert request["auth"] == ("Basic", "SK1", "key-secret")


async def test_missing_credentials_are_named():
    with pytest.raises(TwilioCredentialsMissing, match="TWILIO_ACCOUNT_SID"):
        await TwilioCalls("http://127.0.0.1:9", {}).hang_up("CA1")


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
