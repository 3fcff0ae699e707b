"""The RESP encoder (coordinator/resp.py) writes what redis-py would."""

from __future__ import annotations

import enum
import http

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from coordinator.resp import FcallEncoder, encode_command


class _Text(str):
    pass


class _Status(str, enum.Enum):  # str() of it is "Status.READY", its text "ready"
    READY = "ready"


class _Raw(bytes):
    pass


def test_commands_are_encoded_as_redis_py_encodes_them() -> None:
    # Subclasses (an IntEnum among them) take the slow path the exact types skip: encoded alike.
    args = ("EVALSHA", "a" * 40, 2, "tether:{t}:tasks", b"\x00raw", "h\u00e9llo", -17, 2.5, 1e-7, memoryview(b"mv"),
            _Text("sub"), _Raw(b"sub"), http.HTTPStatus.OK, _Status.READY)
    assert encode_command(args) == b"".join(Connection().pack_command(*args))
    for bad in (None, True, object()):
        with pytest.raises(DataError):
            encode_command(("SET", "k", bad))


@given(st.lists(st.one_of(st.text(), st.binary(), st.integers(), st.floats(allow_nan=False)), max_size=20))
def test_any_arguments_are_encoded_as_redis_py_encodes_them(args: list[object]) -> None:
    assert encode_command(("FCALL", *args)) == b"".join(Connection().pack_command("FCALL", *args))


_ARG = st.one_of(st.text(max_size=8), st.binary(max_size=8), st.integers(), st.floats(allow_nan=False))


@given(st.lists(st.tuples(st.sampled_from(["f_a", "f_b"]),
                          st.lists(st.sampled_from(["k:{t}:a", "k:{t}:b", "k:{t}:c"]), max_size=3),
                          st.lists(_ARG, max_size=5)), max_size=12))
def test_an_fcall_is_written_as_redis_py_packs_it_whatever_heads_were_kept_before(
        calls: list[tuple[str, list[str], list[object]]]) -> None:
    encoder = FcallEncoder()
    for function, keys, args in calls:
        assert encoder.encode(function, keys, args) == b"".join(
            Connection().pack_command("FCALL", function, len(keys), *keys, *args))
