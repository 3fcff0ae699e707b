"""The task view's strip of artifacts (issue 30 §5), in real headless Chromium against a real
coordinator process: the test is the host, claims a task and uploads six step screenshots (real
PNGs, each its own width) and a log over the host API, some before the view opens and some while
it is open. The strip shows six thumbnails in step order, a click opens the full image, the log
opens as text, the bytes are fetched with the token, and closing the view revokes their URLs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser.conftest import Dashboard, running_goal
from tests.pngs import solid_png
from tests.support import ADMIN, CoordinatorProcess

pytestmark = pytest.mark.e2e

LOG = "step 0: home\nstep 5: done <b>not markup</b>\n"
WIDTHS = {step: 40 + step for step in range(6)}  # a thumbnail's image is known by its width


def upload(coordinator: CoordinatorProcess, lease: dict[str, Any], name: str, body: bytes, content_type: str,
           step_index: int | None = None) -> None:
    params: dict[str, Any] = {"task_id": lease["task_id"], "attempt": lease["attempt"]}
    if step_index is not None:
        params["step_index"] = step_index
    response = coordinator.api.put(f"/internal/v1/hosts/host-a/leases/{lease['lease_id']}/artifacts/{name}",
                                   params=params, content=body,
                                   headers={**coordinator.host_headers("host-a"), "content-type": content_type})
    assert response.status_code == 201, response.text


def screenshot(coordinator: CoordinatorProcess, lease: dict[str, Any], step: int) -> None:
    png = solid_png(WIDTHS[step], 30, (40 * step, 120, 255 - 40 * step))
    upload(coordinator, lease, f"step-{step}.png", png, "image/png", step_index=step)


STRIP = """[...document.querySelectorAll('#task-artifacts li.artifact')].map(li => [li.dataset.name,
    li.dataset.step, li.querySelector('img')?.naturalWidth ?? null])"""


@pytest.mark.parametrize("coordinator_settings", [{"COORDINATOR_LEASE_TTL_S": "60"}])
def test_the_task_view_shows_a_thumbnail_per_step_a_click_opens_it_and_the_log_reads_as_text(
    coordinator: CoordinatorProcess, dashboard: Dashboard
) -> None:
    task, lease = running_goal(coordinator, "host-a", "phone-1")
    host = coordinator.host_headers("host-a")
    for step in (2, 0, 1):  # stored before the view opens, out of order: the listing shows them
        screenshot(coordinator, lease, step)

    dashboard.open_signed_in()
    page = dashboard.page
    page.js(f"location.hash = '#task/{task['task_id']}'")
    page.wait_for(f"{STRIP}.filter(([, , w]) => w > 0).length === 3", what="the three stored thumbnails drawn")

    for step in (5, 3, 4):  # while the view is open: the feed's artifact events bring them
        screenshot(coordinator, lease, step)
    upload(coordinator, lease, "log.txt", LOG.encode(), "text/plain")
    page.wait_for(f"{STRIP}.filter(([, , w]) => w > 0).length === 6 && {STRIP}.length === 7",
                  what="six thumbnails and the log")
    strip = page.js(STRIP)
    # By step, each its own image (its width), the log (no step) after the steps.
    assert strip == [*([f"step-{s}.png", str(s), WIDTHS[s]] for s in range(6)), ["log.txt", "", None]], strip
    assert page.js("document.querySelectorAll('#task-artifacts img').length") == 6
    assert all(src.startswith("blob:") for src in page.js(
        "[...document.querySelectorAll('#task-artifacts img')].map(i => i.src)"))
    # The bytes were read with the token in a header (the address carries none), once each.
    reads = [(url, headers) for url, headers in page.sent if "/artifacts/" in url]
    assert sorted(url.split("/artifacts/")[1] for url, _ in reads) == sorted(
        f"step-{s}.png?attempt=1" for s in range(6)), reads
    assert all(headers.get("Authorization") == f"Bearer {ADMIN}" for _, headers in reads)
    assert all(ADMIN not in url for url in page.requests)

    page.click('#task-artifacts li[data-name="step-3.png"] button')
    page.wait_for("document.getElementById('artifact-viewer').open", what="the viewer")
    page.wait_for("document.querySelector('#artifact-viewer img.artifact-full')?.naturalWidth === 43",
                  what="the full image of step 3")
    assert "step-3.png" in page.text("#artifact-viewer-title")
    assert page.js("document.getElementById('artifact-viewer-save').download") == "step-3.png"
    page.click("#artifact-viewer-close")
    page.wait_for("!document.getElementById('artifact-viewer').open", what="the viewer closed")

    page.click('#task-artifacts li[data-name="log.txt"] button')
    page.wait_for("document.querySelector('#artifact-viewer pre.artifact-text')?.textContent === " + json.dumps(LOG),
                  what="the log as text")
    assert page.js("document.querySelector('#artifact-viewer-body b')") is None  # text, never markup
    page.click("#artifact-viewer-close")

    # A step of the task (a renewal's progress) draws the view again: the strip stays as it was.
    renewal = {"task_id": lease["task_id"], "attempt": lease["attempt"],
               "progress": {"step_index": 5, "status": "done", "summary": "all six"}}
    response = coordinator.api.post(f"/internal/v1/hosts/host-a/leases/{lease['lease_id']}/renew", json=renewal,
                                    headers=host)
    assert response.status_code == 200, response.text
    page.wait_for("!!document.querySelector('#task-timeline li.step[data-step=\"5\"]')", what="the step drawn")
    assert page.js(STRIP) == strip
    # The live events log is not flooded: an artifact is the task view's, not a line there.
    assert page.js("document.querySelectorAll('#events li[data-type=artifact]').length") == 0

    # Closing the view revokes the object URLs: their bytes are gone from the page.
    url = page.js("document.querySelector('#task-artifacts img').src")
    loads = f"""new Promise(done => {{ const image = new Image(); image.onload = () => done(true);
        image.onerror = () => done(false); image.src = {json.dumps(url)}; }})"""
    assert page.js(loads) is True
    page.click("#detail-close")
    page.wait_for("document.getElementById('detail').hidden", what="the view closed")
    assert page.js(loads) is False


def test_the_strip_orders_by_attempt_then_step_and_an_artifact_moves_no_chart(
    coordinator: CoordinatorProcess, dashboard: Dashboard
) -> None:
    # The pure parts, in the browser: the strip's order over attempts, listed descriptions and
    # feed events alike (an event has `at` and no `step_index` when it is no step's); and the
    # charts, which count waiting tasks from the feed, unmoved by artifact events.
    dashboard.open()
    listed = [
        {"name": "final.png", "attempt": 1, "step_index": None, "created_at": "2026-12-03T10:00:09.000Z"},
        {"name": "step-1.png", "attempt": 2, "step_index": 1, "created_at": "2026-12-03T10:00:21.000Z"},
        {"name": "log.txt", "attempt": 1, "step_index": None, "created_at": "2026-12-03T10:00:10.000Z"},
        {"name": "step-10.png", "attempt": 1, "step_index": 10, "created_at": "2026-12-03T10:00:08.000Z"},
        {"name": "step-2.png", "attempt": 1, "step_index": 2, "created_at": "2026-12-03T10:00:05.000Z"},
    ]
    event = {"type": "artifact", "at": "2026-12-03T10:00:20.000Z", "task_id": "t", "attempt": 2, "name": "log.txt",
             "size": 3, "content_type": "text/plain"}
    answer = dashboard.page.js(f"""(async () => {{
        const {{ compareArtifacts, describe }} = await import('/ui/artifacts.js');
        const {{ Activity }} = await import('/ui/activity.js');
        const all = [...{json.dumps(listed)}, {json.dumps(event)}].map(describe);
        const activity = new Activity();
        activity.add({{ type: "created", at: "2026-12-03T10:00:00.000Z", task_id: "t", attempt: 1, status: "queued" }});
        activity.add({json.dumps(event)});
        return {{
            order: all.sort(compareArtifacts).map(a => `${{a.attempt}}:${{a.name}}`),
            waiting: activity.changes.reduce((n, c) => n + c.d, 0),
        }};
    }})()""")
    assert answer["order"] == ["1:step-2.png", "1:step-10.png", "1:final.png", "1:log.txt", "2:step-1.png",
                               "2:log.txt"]
    assert answer["waiting"] == 1  # still queued: an artifact is no transition


@pytest.mark.parametrize("coordinator_settings", [{"COORDINATOR_LEASE_TTL_S": "60"}])
def test_a_thumbnail_whose_bytes_are_not_committed_yet_is_read_again(
    coordinator: CoordinatorProcess, dashboard: Dashboard
) -> None:
    # An upload describes its artifact, and the feed announces it, before its bytes are
    # committed: a read in between answers 404 (coordinator/blobs/artifacts.py), as this one does.
    task, lease = running_goal(coordinator, "host-a", "phone-1")
    dashboard.open_signed_in()
    page = dashboard.page
    page.js(f"location.hash = '#task/{task['task_id']}'")
    page.wait_for("!!document.getElementById('task-artifacts')", what="the task view")
    path = f"/api/v1/tasks/{task['task_id']}/artifacts/step-0.png"
    page.refuse_once(path, 404, {"code": "not_found", "message": "no artifact step-0.png"})
    screenshot(coordinator, lease, 0)
    page.wait_for(f"{STRIP}.filter(([, , w]) => w === {WIDTHS[0]}).length === 1", what="the thumbnail, read again")
    assert len([url for url in page.requests if path in url]) == 2
    assert page.js("document.querySelector('#task-artifacts li[data-step=\"0\"]').dataset.state") is None


@pytest.mark.parametrize("coordinator_settings", [{"COORDINATOR_LEASE_TTL_S": "60"}])
def test_a_long_run_s_thumbnails_are_read_as_the_strip_scrolls_to_them(
    coordinator: CoordinatorProcess, dashboard: Dashboard
) -> None:
    task, lease = running_goal(coordinator, "host-a", "phone-1")
    for step in range(60):
        upload(coordinator, lease, f"step-{step}.png", solid_png(40, 30, (step * 4, 0, 0)), "image/png", step)
    dashboard.open_signed_in()
    page = dashboard.page
    page.js(f"location.hash = '#task/{task['task_id']}'")
    page.wait_for("document.querySelectorAll('#task-artifacts li.artifact').length === 60", what="sixty tiles")
    page.wait_for("document.querySelector('#task-artifacts li[data-step=\"6\"] img').naturalWidth === 40",
                  what="the thumbnails in view")
    read = len([url for url in page.requests if "/artifacts/step-" in url])
    assert 7 <= read < 60, read  # the ones in reach of the strip's visible part, not all sixty
    assert not page.js("document.querySelector('#task-artifacts li[data-step=\"59\"] img').src")

    page.js("(list => { list.scrollLeft = list.scrollWidth; })(document.querySelector('#task-artifacts ol'))")
    page.wait_for("document.querySelector('#task-artifacts li[data-step=\"59\"] img').naturalWidth === 40",
                  what="the last thumbnail, once scrolled to")
    # An event draws the view again, strip and all: the strip stays where it was scrolled to
    # (an element taken out of the page forgets its scroll, and a running task's steps come
    # every few seconds).
    scrolled = page.js("document.querySelector('#task-artifacts ol').scrollLeft")
    assert scrolled > 0
    renewal = {"task_id": lease["task_id"], "attempt": lease["attempt"],
               "progress": {"step_index": 59, "status": "done", "summary": "the last"}}
    response = coordinator.api.post(f"/internal/v1/hosts/host-a/leases/{lease['lease_id']}/renew", json=renewal,
                                    headers=coordinator.host_headers("host-a"))
    assert response.status_code == 200, response.text
    page.wait_for("!!document.querySelector('#task-timeline li.step[data-step=\"59\"]')", what="the step drawn")
    assert page.js("document.querySelector('#task-artifacts ol').scrollLeft") == scrolled
