"""Call control: the ``end_call`` and ``transfer_call`` tools, and Twilio's REST API that carries them out.

The tools only ask (``CallContext.end_call``, ``transfer_call``); the session
carries the request out once the answer being spoken has finished, so the
agent says its goodbye first. On ``/ws`` the client gets a final JSON message
(``call_ended``, then close 1000; or ``transfer``). On a Twilio call the live
call is updated through Twilio's REST API: ``Status=completed`` hangs up,
``Twiml=<Response><Dial>…</Dial></Response>`` transfers.

Credentials come from the environment, never from settings or flags:
``TWILIO_ACCOUNT_SID`` and either ``TWILIO_API_KEY`` with ``TWILIO_API_SECRET``
or ``TWILIO_AUTH_TOKEN`` (Basic auth, as Twilio documents). The base URL is
the ``--twilio-api-url`` setting, so tests point it at a local server.

Every value that goes into the request path is checked and percent-encoded:
a call SID must be ``CA`` and 32 hex digits, so no stream can steer the
request to another call or account. Transfer targets are E.164 numbers or
SIP URIs (:mod:`voice_agent.agent.dial_targets`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from urllib.parse import quote
from xml.sax.saxutils import escape

import httpx

from ..protocols.telephony import is_call_sid
from .agent import CallContext
from .dial_targets import checked_transfer_target, is_sip_uri
from .tools import Tool, tool

log = logging.getLogger(__name__)

DEFAULT_TWILIO_API_URL = "https://api.twilio.com"


@tool
def end_call(context: CallContext, reason: str = "") -> str:
    """End the call. Call this when the caller says goodbye or has nothing more to ask; then say a short goodbye.

    Args:
        reason: Why the call ends, in a few words.
    """
    context.end_call(reason)
    return "The call ends after your next sentence. Say a short goodbye now."


def transfer_call(destinations: Mapping[str, str]) -> Tool:
    """A ``transfer_call`` tool that may transfer only to ``destinations`` (name → number or SIP URI).

    The model picks a name, never a number: a caller cannot talk the agent
    into dialling somewhere else. Each target must be an E.164 number or a
    SIP URI: another raises ValueError here, when the agent is built.
    """
    if not destinations:
        raise ValueError("transfer_call needs at least one destination")
    targets = {name: checked_transfer_target(to) for name, to in destinations.items()}

    def transfer(context: CallContext, to: str) -> str:
        context.transfer_call(targets[to])
        return f"The call is transferred to {to} after your next sentence. Tell the caller so now."

    made = tool(
        transfer,
        name="transfer_call",
        description="Transfer the caller to a person. Say that you are transferring them.",
    )
    made.parameters["properties"]["to"] = {"type": "string", "enum": sorted(targets), "description": "Who to."}
    return made


class TwilioCredentialsMissing(RuntimeError):
    pass


class TwilioCalls:
    """Updates live Twilio calls through the REST API (``Calls/{CallSid}.json``)."""

    def __init__(self, base_url: str = DEFAULT_TWILIO_API_URL, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        self.base_url = base_url.rstrip("/")
        self.account_sid = environ.get("TWILIO_ACCOUNT_SID", "")
        key, secret = environ.get("TWILIO_API_KEY", ""), environ.get("TWILIO_API_SECRET", "")
        if not (key and secret):
            key, secret = self.account_sid, environ.get("TWILIO_AUTH_TOKEN", "")
        self._auth = (key, secret)

    @property
    def configured(self) -> bool:
        return bool(self.account_sid and all(self._auth))

    async def hang_up(self, call_sid: str) -> None:
        await self._update(call_sid, {"Status": "completed"})

    async def transfer(self, call_sid: str, to: str) -> None:
        to = checked_transfer_target(to)
        dial = f"<Sip>{escape(to)}</Sip>" if is_sip_uri(to) else escape(to)
        await self._update(call_sid, {"Twiml": f"<Response><Dial>{dial}</Dial></Response>"})

    async def _update(self, call_sid: str, form: dict[str, str]) -> None:
        if not self.configured:
            raise TwilioCredentialsMissing(
                "set TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN (or TWILIO_API_KEY and TWILIO_API_SECRET)"
            )
        if not is_call_sid(call_sid):
            raise ValueError("not a Twilio call SID (CA and 32 hex digits); no request sent")
        account, call = quote(self.account_sid, safe=""), quote(call_sid, safe="")
        url = f"{self.base_url}/2010-04-01/Accounts/{account}/Calls/{call}.json"
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.post(url, data=form, auth=self._auth)
        if response.status_code >= 400:
            raise RuntimeError(f"Twilio answered HTTP {response.status_code}: {response.text[:300]}")
        log.info("Twilio call %s updated: %s", call_sid, ", ".join(form))
