"""A webhook's signature, made and checked in one place (``wire.signatures``): the coordinator's
``signature`` and the receiver's ``verify_signature`` (``tether.verify_signature``) agree with the
worked example the documentation gives receivers, and accept exactly what is signed with the
secret, over the raw body, within the tolerance (properties over any secret, body and time)."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import tether
from wire.signatures import signature, verify_signature

DOCS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"

secrets_ = st.text(min_size=1, max_size=60)
bodies = st.binary(max_size=2000)
times = st.integers(min_value=0, max_value=2**33)


def _documented(name: str, text: str) -> str:
    """The value the documentation's receiver example gives ``name`` (Python's block and the
    shell's must say the same)."""
    python = re.findall(rf"^{name} = b?(['\"])(.*)\1$", text, re.MULTILINE)
    shell = re.findall(rf"^{name}='(.*)'$", text, re.MULTILINE)
    assert len(python) == 1 and shell == [python[0][1]], (name, python, shell)
    return python[0][1]


def test_the_documented_example_is_what_the_coordinator_signs_and_the_receiver_accepts() -> None:
    text = DOCS.read_text()
    secret, body, header = (_documented(name, text) for name in ("secret", "body", "header"))
    shape = re.fullmatch(r"t=(\d+),v1=[0-9a-f]{64}", header)
    assert shape, header
    timestamp = int(shape[1])
    assert signature(secret, timestamp, body.encode()) == header
    assert verify_signature(secret, header, body.encode(), now=timestamp)
    assert tether.verify_signature is verify_signature  # the receiver's check is the one tested here


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
