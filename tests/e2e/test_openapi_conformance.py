"""The OpenAPI document against the server that serves it: schemathesis (its pytest integration,
every check it has) generates requests from ``/openapi.json`` and sends them to a real
coordinator process, on the operator API and on the host API. A schema-valid request the server
refuses, a schema-invalid one it accepts, an undocumented status or a response that does not
match its schema is a failure: the document must say exactly what the server does.

Every operation the document lists is tested, so a route added to ``coordinator/api/routes.py`` is
checked without touching this file. Bounded and reproducible: a fixed seed, derandomized
generation, no example database, a few examples an operation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis

from coordinator.api.openapi import openapi_document
from coordinator.api.routes import ENDPOINTS
from tests.support import (
    ADMIN,
    HOSTS,
    CoordinatorProcess,
    coordinator_env,
    fresh_prefix,
    running,
)

pytestmark = [pytest.mark.e2e]

HOST = "host-a"
SEED = 28
# Examples an operation in the fuzzing phase; the coverage phase adds its own boundary cases.
MAX_EXAMPLES = 10
# The event feed is a stream that never ends: a request reads it until this long a silence (or
# one event), which must also outlast a busy machine's slowest answer; and a few examples.
FEED_READ_S = 0.5
FEED_EXAMPLES = 3


# An artifact upload's raw body may be video/mp4, which schemathesis has no serializer for: bytes,
# as it sends application/octet-stream (images it knows already).
schemathesis.serializer.alias("video/mp4", "application/octet-stream")

# The document as the app serves it at /openapi.json (a test below holds them equal), loaded at
# collection so each operation is a test of its own. (schemathesis's lazy loader,
# ``schemathesis.pytest.from_fixture``, fails on pytest 9.2, which renamed a node's ``_nodeid``.)
DOCUMENT = openapi_document(ENDPOINTS)
_enrollment_token: list[str] = []  # minted by the coordinator fixture, for the enroll route


def _schema(api_prefix: str, auth: dict[str, Any], parameters: dict[str, str]) -> schemathesis.BaseSchema:
    config = schemathesis.Config.from_dict({
        "seed": SEED,
        # where the coordinator fixture listens is told each call (its port is chosen then)
        "base-url": "http://127.0.0.1",
        "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none"},
        "phases": {"stateful": {"enabled": False}},
        "auth": {"openapi": auth},
        "parameters": parameters,
        "request-timeout": 10,
        "operations": [{"include-path": "/api/v1/events", "max-stream-events": 1,
                        "request-timeout": FEED_READ_S, "generation": {"max-examples": FEED_EXAMPLES},
                        # its boundary cases are queries the other operations' cover, each a read
                        "phases": {"coverage": {"enabled": False}}}],
    })
    return schemathesis.openapi.from_dict(DOCUMENT, config=config).include(path_regex=f"^{api_prefix}")


operator_api = _schema("/api/v1/", {"operator": {"bearer": ADMIN}}, {})
# Every host route under the one static host the credential is bound to: another host's path is
# a 403 before anything else is looked at, and would test nothing else.
host_api = _schema("/internal/v1/", {"host": {"bearer": HOSTS[HOST]}}, {"host_id": HOST})


# The enroll route's bearer is an enrollment token, which only the running coordinator can mint,
# while schemathesis builds its coverage cases (credentials in) at collection: they carry this
# stand-in, which the test swaps for the minted token before sending.
ENROLLMENT_STAND_IN = "Bearer enrollment-token-minted-at-run-time"


@host_api.auth().apply_to(path="/internal/v1/enroll")
class EnrollmentCredential:
    def get(self, case: schemathesis.Case, ctx: schemathesis.AuthContext) -> str:
        return ENROLLMENT_STAND_IN

    def set(self, case: schemathesis.Case, data: str, ctx: schemathesis.AuthContext) -> None:
        case.headers = {**(case.headers or {}), "Authorization": data}


@pytest.fixture(scope="module")
def coordinator() -> Iterator[CoordinatorProcess]:
    # The failed-credential throttle off: schemathesis's ignored_auth check sends bad credentials
    # on purpose, and each must be the 401 the document promises, not a 429 after twenty. Every
    # network allowed to webhooks: whether a URL's host is refused depends on what it resolves to,
    # which no schema can say (tests/coordinator/test_webhook_targets.py checks the refusals).
    with fresh_prefix() as prefix:
        env = coordinator_env(prefix, COORDINATOR_AUTH_FAILURES_MAX="0", COORDINATOR_CLAIM_WAIT_MAX_S="0",
                              COORDINATOR_WEBHOOK_ALLOW_NETWORKS="0.0.0.0/0,::/0")
        with running(CoordinatorProcess(env)) as process:
            response = process.api.post("/api/v1/enrollment-tokens", json={"max_uses": 100_000})
            assert response.status_code == 201, response.text
            _enrollment_token[:] = [response.json()["token"]]
            yield process
            _enrollment_token.clear()


@operator_api.parametrize()
def test_operator_api_does_what_its_document_says(case: schemathesis.Case, coordinator: CoordinatorProcess) -> None:
    case.call_and_validate(base_url=coordinator.url)


@host_api.parametrize()
def test_host_api_does_what_its_document_says(case: schemathesis.Case, coordinator: CoordinatorProcess) -> None:
    if case.headers and case.headers.get("Authorization") == ENROLLMENT_STAND_IN:
        case.headers["Authorization"] = f"Bearer {_enrollment_token[0]}"
    case.call_and_validate(base_url=coordinator.url)


def test_the_document_tested_is_the_one_served_and_lists_every_route(coordinator: CoordinatorProcess) -> None:
    """The tests above cover what the document lists: it is the one the server serves, and it
    lists every route the app has."""
    served = httpx.get(f"{coordinator.url}/openapi.json").json()
    assert served == json.loads(json.dumps(DOCUMENT))
    listed = {(method.upper(), path) for path, ops in served["paths"].items() for method in ops}
    assert {(e.method, e.path) for e in ENDPOINTS} == listed
