"""A run's report (PROTOCOL.md, "Runs"): JUnit XML that a JUnit library reads back and the JUnit
schema Jenkins reads accepts (tests/coordinator/schemas/jenkins-junit.xsd), and the same as JSON,
on real Redis, fakeredis and the cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import anyio
import anyio.from_thread
import orjson
import pytest
import xmlschema
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from junitparser import Failure, JUnitXml, Skipped, TestCase, TestSuite

import wire
from tests.conftest import Api
from tests.coordinator.helpers import claim_one

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

SCHEMA = xmlschema.XMLSchema(Path(__file__).parent / "schemas" / "jenkins-junit.xsd")
WORK = [{"kind": "goal", "goal": "open settings"}, {"kind": "workflow", "workflow": {"name": "login"}}]


@pytest.fixture
async def api_with_artifacts(api_factory: Callable[..., Any], tmp_path: Path) -> AsyncIterator[Api]:
    async with api_factory(artifacts_dir=tmp_path / "artifacts") as api:
        yield api


async def _finished_run(api: Api) -> dict[str, Any]:
    """A matrix of two work items on a1 and a2: open settings succeeds on a1 (with a log) and fails
    on a2 (after a step's progress); login runs on a1 and waits for a2 when the run is cancelled,
    so it ends cancelled on both."""
    await api.heartbeat("host-a", ["a1", "a2"])
    created = await api.admin("POST", "/api/v1/runs", json={
        "name": "nightly", "matrix": {"work": WORK, "devices": {"driver": "sim"}}})
    assert created.status_code == 201, created.text
    run: dict[str, Any] = created.json()
    passed = await claim_one(api, "host-a")
    log = await api.client.put(
        f"/internal/v1/hosts/host-a/leases/{passed['lease_id']}/artifacts/run.log",
        params={"task_id": passed["task_id"], "attempt": passed["attempt"]}, content=b"all good\n",
        headers={**api.host_headers("host-a"), "content-type": "text/plain"})
    assert log.status_code == 201, log.text
    assert (await api.result("host-a", passed)).status_code == 200
    failing = await claim_one(api, "host-a")
    step = {"step_index": 2, "status": "failed", "summary": "Settings did not open"}
    assert (await api.renew("host-a", failing, progress=step)).status_code == 200
    assert (await api.result("host-a", failing, "failed", failure_reason="assertion_failed")).status_code == 200
    running = await claim_one(api, "host-a")
    assert (await api.admin("POST", f"/api/v1/runs/{run['run_id']}/cancel")).status_code == 200
    assert (await api.result("host-a", running, "cancelled", failure_reason="cancelled")).status_code == 200
    return {"run": run, "passed": passed, "failing": failing}


async def test_the_junit_report_is_valid_junit_that_a_junit_library_reads(api_with_artifacts: Api) -> None:
    api = api_with_artifacts
    made = await _finished_run(api)
    response = await api.admin("GET", f"/api/v1/runs/{made['run']['run_id']}/report", params={"format": "junit"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/xml")
    SCHEMA.validate(response.text)  # raises, naming the element, if Jenkins's schema refuses it

    report = JUnitXml.fromstring(response.content)
    suites = {suite.name: suite for suite in report if isinstance(suite, TestSuite)}
    assert set(suites) == {"open settings", "login"}
    opened = suites["open settings"]
    assert (opened.tests, opened.failures, opened.skipped) == (2, 1, 0)
    assert (suites["login"].tests, suites["login"].skipped) == (2, 2)
    cases = {(case.classname, case.name): case for suite in suites.values() for case in suite
             if isinstance(case, TestCase)}
    assert set(cases) == {(work, device) for work in ("open settings", "login") for device in ("a1", "a2")}
    passed = cases[("open settings", "a1")]
    assert passed.is_passed and passed.time >= 0
    assert "run.log" in (passed.system_out or "") and made["passed"]["task_id"] in (passed.system_out or "")
    failed = cases[("open settings", "a2")]
    [failure] = [r for r in failed.result if isinstance(r, Failure)]
    assert failure.message == "assertion_failed" and "Settings did not open" in (failure.text or "")
    for device in ("a1", "a2"):
        assert [type(r) for r in cases[("login", device)].result] == [Skipped]


async def test_a_failure_names_its_reason_and_error_and_the_step_that_failed_not_the_last_renewed(
        api: Api) -> None:
    """The agent renews at most once a second, so the stored progress may lag the failure: the
    report reads the step and the error from the result, where the agent put them."""
    await api.heartbeat("host-a", ["a1"])
    created = await api.admin("POST", "/api/v1/runs", json={"name": "smoke", "tasks": [
        {"kind": "workflow", "workflow": {"name": "notes"}, "device_id": "a1"}]})
    assert created.status_code == 201, created.text
    failing = await claim_one(api, "host-a")
    lagging = {"step_index": 1, "status": "running", "summary": "wait 500 ms"}
    assert (await api.renew("host-a", failing, progress=lagging)).status_code == 200
    steps = [{"step_index": 0, "status": "succeeded", "summary": "key home"},
             {"step_index": 1, "status": "succeeded", "summary": "wait 500 ms"},
             {"step_index": 2, "status": "failed", "summary": "assert text 'Nonexistent app'"}]
    metadata = {"workflow": "notes", "steps": 2, "failed_step": 2, "error": "text not on screen: 'Nonexistent app'",
                "last_steps": steps}
    reported = await api.result("host-a", failing, "failed", failure_reason="assertion_failed", metadata=metadata)
    assert reported.status_code == 200, reported.text
    response = await api.admin("GET", f"/api/v1/runs/{created.json()['run_id']}/report", params={"format": "junit"})
    SCHEMA.validate(response.text)
    [case] = [case for suite in JUnitXml.fromstring(response.content) if isinstance(suite, TestSuite)
              for case in suite if isinstance(case, TestCase)]
    [failure] = [r for r in case.result if isinstance(r, Failure)]
    assert failure.message == "assertion_failed: text not on screen: 'Nonexistent app'"
    lines = (failure.text or "").splitlines()
    assert lines[0] == "failed at step 2: assert text 'Nonexistent app'"
    assert lines[1:] == ["last steps:", "  step 0 (succeeded): key home", "  step 1 (succeeded): wait 500 ms",
                         "  step 2 (failed): assert text 'Nonexistent app'"]


async def test_the_json_report_gives_each_tasks_result_and_artifacts(api_with_artifacts: Api) -> None:
    api = api_with_artifacts
    made = await _finished_run(api)
    response = await api.admin("GET", f"/api/v1/runs/{made['run']['run_id']}/report")
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["run"]["status"] == "cancelled" and report["run"]["name"] == "nightly"
    assert report["run"]["counts"]["succeeded"] == 1 and report["run"]["counts"]["failed"] == 1
    cases = {(suite["work"], case["device_id"]): case for suite in report["suites"] for case in suite["cases"]}
    assert cases[("open settings", "a1")]["artifacts"] == ["run.log"]
    assert cases[("open settings", "a1")]["result"]["status"] == "succeeded"
    failed = cases[("open settings", "a2")]
    assert failed["failure_reason"] == "assertion_failed" and failed["last_step"]["summary"] == "Settings did not open"
    assert {cases[("login", d)]["status"] for d in ("a1", "a2")} == {"cancelled"}


async def test_a_report_of_a_running_run_names_what_has_not_ended(api: Api) -> None:
    created = await api.admin("POST", "/api/v1/runs", json={"tasks": [
        {"kind": "goal", "goal": "wait", "device_id": "nowhere"}]})
    run_id = created.json()["run_id"]
    response = await api.admin("GET", f"/api/v1/runs/{run_id}/report", params={"format": "junit"})
    SCHEMA.validate(response.text)
    [suite] = list(JUnitXml.fromstring(response.content))
    [case] = list(suite)
    assert case.name == "nowhere" and [r.message for r in case.result] == ["not ended: queued"]


async def test_a_report_of_no_such_run_is_404_and_an_unknown_format_400(api: Api) -> None:
    assert (await api.admin("GET", "/api/v1/runs/r_none/report")).status_code == 404
    created = await api.admin("POST", "/api/v1/runs", json={"tasks": [{"kind": "goal", "goal": "g",
                                                                       "device_id": "a1"}]})
    bad = await api.admin("GET", f"/api/v1/runs/{created.json()['run_id']}/report", params={"format": "xml"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


# -- whatever text a client stores -----------------------------------------------------------

# What XML 1.0 allows in a document, less the C0 and C1 controls the contract never stores (tab
# and newline aside; a carriage return is a C0 control too). DEL (U+007F) is neither.
def _xml_stored_text(value: str) -> bool:
    return all(c in "\t\n" or (" " <= c <= "\x7f") or ("\xa0" <= c <= "\ud7ff") or ("\ue000" <= c <= "\ufffd")
               or c >= "\U00010000" for c in value)


# Any text, with the characters that break XML or terminals made likely: C0 and C1 controls,
# DEL, U+FFFE, U+FFFF, the last characters before and after the surrogates, and astral ones. A
# lone surrogate is no UTF-8 text: sent as a JSON escape it is refused (the test after this).
_ODD = ["\x00", "\x08", "\x0b", "\x0d", "\x1b", "\x7f", "\x80", "\x85", "\x9b", "\x9f", "\ud7ff", "\ue000",
        "\ufdd0", "\ufffd", "\ufffe", "\uffff", "\U0001f600", "\U0010ffff", "<", "&", "]", ">", '"']
_TEXT = st.text(alphabet=st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from(_ODD)), max_size=40)
_TEXT_EXAMPLES = settings(max_examples=40, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _texts_of(element: ElementTree.Element) -> list[str]:
    return [value for node in element.iter() for value in (node.text, node.tail, *node.attrib.values()) if value]


async def test_any_text_a_client_stores_comes_back_in_a_junit_report_a_strict_xml_parser_accepts(api: Api) -> None:
    """A run's name and goal, a host's progress summary, failure_reason and metadata: whatever a
    client sends, the report is well-formed XML, and what it stored holds no control character
    (tab and newline aside) and nothing XML 1.0 forbids (PROTOCOL.md, "Conventions")."""
    await api.heartbeat("host-a", ["a1"])

    async def store_and_report(text: str) -> None:
        created = await api.admin("POST", "/api/v1/runs", json={
            "name": "n" + text, "tasks": [{"kind": "goal", "goal": "g" + text, "device_id": "a1"}]})
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        assignment = await claim_one(api, "host-a")
        progress = {"step_index": 1, "status": ("s" + text)[:wire.PROGRESS_STATUS_MAX_CHARS], "summary": text}
        renewed = await api.renew("host-a", assignment, progress=progress)
        assert renewed.status_code == 200 and renewed.json()["progress"] == "stored", renewed.text
        assert (await api.result("host-a", assignment, "failed", failure_reason="r" + text,
                                 metadata={text: text})).status_code == 200
        response = await api.admin("GET", f"/api/v1/runs/{run_id}/report", params={"format": "junit"})
        assert response.status_code == 200, response.text
        root = ElementTree.fromstring(response.content)  # expat: refuses what XML 1.0 forbids
        SCHEMA.validate(response.text)
        assert [v for v in _texts_of(root) if not _xml_stored_text(v)] == []
        report = (await api.admin("GET", f"/api/v1/runs/{run_id}/report")).json()
        [case] = report["suites"][0]["cases"]
        stored = [report["run"]["name"], report["suites"][0]["work"], case["failure_reason"],
                  case["last_step"]["summary"], case["last_step"]["status"], *case["result"]["metadata"],
                  *case["result"]["metadata"].values()]
        assert all(_xml_stored_text(value) for value in stored), stored

    @_TEXT_EXAMPLES
    @given(text=_TEXT)
    @example(text="\ufffe\uffff\x85\x9b[31m")  # what the probes stored
    def examples(text: str) -> None:
        anyio.from_thread.run(store_and_report, text)

    await anyio.to_thread.run_sync(examples)


async def test_text_an_earlier_version_stored_raw_still_makes_a_well_formed_report(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    created = await api.admin("POST", "/api/v1/runs", json={
        "name": "nightly", "tasks": [{"kind": "goal", "goal": "open settings", "device_id": "a1"}]})
    run_id = created.json()["run_id"]
    assignment = await claim_one(api, "host-a")
    step = {"step_index": 1, "status": "failed", "summary": "no Wi-Fi"}
    assert (await api.renew("host-a", assignment, progress=step)).status_code == 200
    assert (await api.result("host-a", assignment, "failed", failure_reason="no_wifi")).status_code == 200
    # as an earlier version stored them: U+FFFF and a C1 control, raw
    store = api.ctx.store
    for key, record_id, fields in ((store.keys.runs, run_id, ("name",)),
                                   (store.keys.tasks, assignment["task_id"], ("goal", "run_work", "failure_reason"))):
        record = orjson.loads(await store.redis.hget(key, record_id))
        for name in fields:
            record[name] += "\uffff\x9b"
        await store.redis.hset(key, record_id, orjson.dumps(record))
    response = await api.admin("GET", f"/api/v1/runs/{run_id}/report", params={"format": "junit"})
    root = ElementTree.fromstring(response.content)
    assert [v for v in _texts_of(root) if not _xml_stored_text(v)] == []
    assert root.attrib["name"] == "nightly" and root.find("testsuite").attrib["name"] == "open settings"


async def test_a_lone_surrogate_escaped_in_json_is_refused_and_nothing_stored(api: Api) -> None:
    body = b'{"name": "a\\ud800b", "tasks": [{"kind": "goal", "goal": "g", "device_id": "a1"}]}'
    refused = await api.client.post("/api/v1/runs", content=body,
                                    headers={**api.admin_headers, "content-type": "application/json"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
    assert (await api.admin("GET", "/api/v1/runs")).json()["runs"] == []


@pytest.mark.parametrize("label", ["\x85", "\x9b", "\ufffe", "\uffff"])
async def test_a_label_holding_a_c1_control_or_a_non_character_is_refused_and_nothing_stored(
        api: Api, label: str) -> None:
    devices = [{"device_id": "a1", "driver": "sim", "status": "available", "labels": {"room": f"lab{label}1"}}]
    refused = await api.heartbeat("host-a", devices)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
    assert (await api.admin("GET", "/api/v1/devices")).json()["devices"] == []
