"""``tether.verify_signature`` accepts exactly what the coordinator signs: the secret, the raw
body and a timestamp within the tolerance (a property over any secret, body and time)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.webhooks import signature
from tether import verify_signature

secrets_ = st.text(min_size=1, max_size=60)
bodies = st.binary(max_size=2000)
times = st.integers(min_value=0, max_value=2**33)


@given(secrets_, bodies, times, st.integers(min_value=-300, max_value=300))
def test_a_delivery_signed_by_the_coordinator_verifies_within_the_tolerance(
        secret: str, body: bytes, t: int, skew: int) -> None:
    assert verify_signature(secret, signature(secret, t, body), body, now=t + skew)


@given(secrets_, secrets_, bodies, bodies, times)
def test_another_secret_or_body_does_not_verify(secret: str, other_secret: str, body: bytes, other_body: bytes,
                                                t: int) -> None:
    header = signature(secret, t, body)
    assert verify_signature(other_secret, header, body, now=t) == (other_secret == secret)
    assert verify_signature(secret, header, other_body, now=t) == (other_body == body)


@given(secrets_, bodies, times, st.integers(min_value=301, max_value=10**6))
def test_a_signature_older_or_newer_than_the_tolerance_does_not_verify(secret: str, body: bytes, t: int,
                                                                        late: int) -> None:
    header = signature(secret, t, body)
    assert not verify_signature(secret, header, body, now=t + late)
    assert not verify_signature(secret, header, body, now=t - late)


@given(st.text(max_size=200), bodies)
def test_a_malformed_header_never_verifies_nor_raises(header: str, body: bytes) -> None:
    assert not verify_signature("whsec_x", header, body, now=0) or "v1=" in header
