"""Where a call may be transferred: an E.164 phone number or a plain SIP URI, nothing else.

The target ends up in TwiML (``<Dial>``) sent with the account's credentials,
so anything that could carry markup, a second destination or a URL
parameter is refused before it gets there.
"""

from __future__ import annotations

import re

from .tools import ToolError

E164 = re.compile(r"\+[1-9][0-9]{1,14}")
# sip:user@host[:port]: user from RFC 3261's unreserved characters, host a DNS name or IPv4 address.
SIP_URI = re.compile(r"sips?:[A-Za-z0-9._~+\-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.\-]{0,251}[A-Za-z0-9])?(?::[0-9]{1,5})?")


class InvalidTransferTarget(ToolError, ValueError):
    """A target refused; a tool error, so the model is told why and can ask the caller again."""


def is_sip_uri(target: str) -> bool:
    return SIP_URI.fullmatch(target) is not None


def checked_transfer_target(target: str) -> str:
    """``target`` if it is an E.164 number (``+15551234567``) or a SIP URI (``sip:desk@pbx.example.com``)."""
    if isinstance(target, str) and (E164.fullmatch(target) or is_sip_uri(target)):
        return target
    raise InvalidTransferTarget(
        "a transfer target must be an E.164 phone number (+ and 2 to 15 digits) or a SIP URI (sip:user@host); refused"
    )
