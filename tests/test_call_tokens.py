"""Call tokens: a stream URL the webhook issued for one call, good once, for a while, on every gateway."""

from __future__ import annotations

from voice_agent.protocols.call_tokens import TTL_S, CallTokens, looks_like_call_token

CALL = "CA" + "4" * 32
OTHER = "CA" + "5" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_token_names_its_call_and_opens_one_stream():
    tokens = CallTokens("shared-secret", Clock())
    token = tokens.issue(CALL)
    assert looks_like_call_token(token) and token.startswith(CALL + ".")
    assert tokens.redeem(token) == CALL
    assert tokens.redeem(token) is None  # the same URL a second time
    assert tokens.redeem(tokens.issue(CALL)) == CALL  # the call back at the webhook: a new token, a new stream


def test_another_gateway_with_the_same_secret_accepts_it_and_one_without_does_not():
    clock = Clock()
    token = CallTokens("shared-secret", clock).issue(CALL)
    assert CallTokens("shared-secret", clock).redeem(token) == CALL
    assert CallTokens("other-secret", clock).redeem(token) is None
    assert CallTokens("", clock).redeem(CallTokens("", clock).issue(CALL)) is None  # a random key per process


def test_a_forged_or_edited_token_is_refused():
    clock = Clock()
    tokens = CallTokens("shared-secret", clock)
    token = tokens.issue(CALL)
    sid, expires, nonce, mac = token.split(".")
    assert tokens.redeem(f"{OTHER}.{expires}.{nonce}.{mac}") is None  # the MAC of one call for another
    assert tokens.redeem(f"{sid}.{int(expires) + 1000}.{nonce}.{mac}") is None  # a later expiry
    assert tokens.redeem(f"{sid}.{expires}.{'0' * 16}.{mac}") is None  # another nonce
    assert tokens.redeem(f"{sid}.{expires}.{nonce}.{'0' * 32}") is None
    for garbage in ("", "CA1.1.1.1", token + "x", token.upper(), f"{sid}/../x.{expires}.{nonce}.{mac}"):
        assert tokens.redeem(garbage) is None
    assert tokens.redeem(token) == CALL  # the real one still works


def test_a_token_expires():
    clock = Clock()
    tokens = CallTokens("shared-secret", clock)
    token = tokens.issue(CALL)
    clock.now += TTL_S + 1
    assert tokens.redeem(token) is None


def test_redeemed_calls_are_forgotten_once_their_tokens_expire():
    clock = Clock()
    tokens = CallTokens("shared-secret", clock)
    for i in range(50):
        assert tokens.redeem(tokens.issue(f"CA{i:032x}")) is not None
    clock.now += TTL_S + 1
    tokens.redeem(tokens.issue(CALL))
    assert len(tokens._redeemed) == 1
