"""HOST_AGENT_* settings: valid shapes, one clear line per bad configuration, secrets hidden."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from agent.runtime import EXAMPLE_WORKFLOWS_DIR
from agent.settings import AgentSettings, ConfigError, load_settings

SECRET = "tht_super-secret-host-token-0123456789"
ENROLL_SECRET = "tet_super-secret-enrollment-0123456789"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("HOST_AGENT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no stray .env file


def env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for key, value in values.items():
        monkeypatch.setenv(f"HOST_AGENT_{key}", value)


def legacy(monkeypatch: pytest.MonkeyPatch, **extra: str) -> None:
    env(monkeypatch, URL="http://127.0.0.1:8000", HOST_ID="host-a", TOKEN=SECRET, **extra)


def test_legacy_settings_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    legacy(monkeypatch, DEVICES="sim:phone-1, sim:phone-2")
    settings = load_settings()
    assert settings.legacy
    assert settings.url == "http://127.0.0.1:8000"
    assert settings.token == SecretStr(SECRET)
    assert [(s.driver, s.local_id) for s in settings.device_specs] == [("sim", "phone-1"), ("sim", "phone-2")]
    assert (settings.poll_wait_s, settings.heartbeat_interval_s, settings.planner) == (25, 15.0, "scripted")
    assert settings.artifacts == "all"  # every run leaves its evidence unless told otherwise


def test_managed_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env(
        monkeypatch,
        URL="https://coord.example/",
        ENROLLMENT_TOKEN=ENROLL_SECRET,
        STATE_DIR=str(tmp_path / "state"),
        DEVICES="adb:*",
        WORKFLOWS_DIR=str(tmp_path),
        POLL_WAIT_S="5",
        HEARTBEAT_INTERVAL_S="0.5",
        LABELS='{"site": "berlin"}',
        PLANNER="openai",
        LLM_BASE_URL="http://127.0.0.1:9999/v1",
        LLM_MODEL="m",
        LLM_API_KEY="sk-secret-key",
        SHUTDOWN_GRACE_S="2.5",
    )
    settings = load_settings()
    assert not settings.legacy
    assert settings.url == "https://coord.example"
    assert settings.state_dir == tmp_path / "state"
    assert settings.labels == {"site": "berlin"}
    assert (settings.poll_wait_s, settings.heartbeat_interval_s, settings.shutdown_grace_s) == (5, 0.5, 2.5)
    assert settings.llm_api_key == SecretStr("sk-secret-key")


def test_dotenv_file_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        f"HOST_AGENT_URL=http://coord:8000\nHOST_AGENT_HOST_ID=host-b\nHOST_AGENT_TOKEN={SECRET}\n"
        "OTHER_SERVICE_SETTING=ignored\n"
    )
    settings = load_settings()
    assert (settings.url, settings.host_id) == ("http://coord:8000", "host-b")


def test_managed_restart_needs_no_enrollment_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "identity.json").write_text('{"enrollment_id": "e", "host_token": "t", "host_id": "h"}')
    env(monkeypatch, URL="http://c", STATE_DIR=str(state))
    assert not load_settings().legacy


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({}, "HOST_AGENT_URL is required"),
        ({"URL": "ftp://coord"}, "HOST_AGENT_URL: must start with http"),
        ({"URL": "http://c"}, "no host identity"),
        ({"URL": "http://c", "HOST_ID": "host-a"}, "HOST_AGENT_HOST_ID and HOST_AGENT_TOKEN must be set together"),
        ({"URL": "http://c", "TOKEN": SECRET}, "must be set together"),
        ({"URL": "http://c", "ENROLLMENT_TOKEN": ENROLL_SECRET}, "HOST_AGENT_STATE_DIR"),
        ({"URL": "http://c", "STATE_DIR": "{tmp}/empty"}, "HOST_AGENT_ENROLLMENT_TOKEN is not set"),
        ({"URL": "http://c", "HOST_ID": "h", "TOKEN": SECRET, "WORKFLOWS_DIR": "{tmp}/nope"},
         "HOST_AGENT_WORKFLOWS_DIR"),
        ({"URL": "http://c", "HOST_ID": "h", "TOKEN": SECRET, "DEVICES": "ios:phone-1"},
         "HOST_AGENT_DEVICES: unknown device driver 'ios'"),
        ({"URL": "http://c", "HOST_ID": "h", "TOKEN": SECRET, "DEVICES": "phone-1"}, "HOST_AGENT_DEVICES"),
        ({"URL": "http://c", "HOST_ID": "h", "TOKEN": SECRET, "POLL_WAIT_S": "-1"}, "HOST_AGENT_POLL_WAIT_S"),
        ({"URL": "http://c", "HOST_ID": "h", "TOKEN": SECRET, "HEARTBEAT_INTERVAL_S": "0"},
         "HOST_AGENT_HEARTBEAT_INTERVAL_S"),
        ({"URL": "http://c", "HOST_ID": "h", "TOKEN": SECRET, "PLANNER": "magic"}, "HOST_AGENT_PLANNER"),
        ({"URL": "http://c", "HOST_ID": "h", "TOKEN": SECRET, "PLANNER": "openai"}, "HOST_AGENT_LLM_BASE_URL"),
        ({"URL": "http://c", "HOST_ID": "h", "TOKEN": SECRET, "LABELS": "site=berlin"}, "HOST_AGENT_LABELS"),
        ({"URL": "http://c", "HOST_ID": "h", "TOKEN": SECRET, "ARTIFACTS": "some"}, "HOST_AGENT_ARTIFACTS"),
    ],
)
def test_bad_configuration_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, values: dict[str, str], needle: str
) -> None:
    env(monkeypatch, **{k: v.replace("{tmp}", str(tmp_path)) for k, v in values.items()})
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert needle in message
    assert "\n" not in message
    assert SECRET not in message and ENROLL_SECRET not in message


def test_secrets_are_hidden_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    legacy(monkeypatch, ENROLLMENT_TOKEN=ENROLL_SECRET, LLM_API_KEY="sk-hidden-key")
    settings = load_settings()
    text = repr(settings) + str(settings) + repr(settings.model_dump())
    for secret in (SECRET, ENROLL_SECRET, "sk-hidden-key"):
        assert secret not in text


def _run_agent(tmp_path: Path, **values: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HOST_AGENT_")}
    environment.update({f"HOST_AGENT_{k}": v for k, v in values.items()})
    repo = str(Path(__file__).resolve().parents[2])  # the checkout under test, however installed
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (repo, environment.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "agent"], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"HOST_ID": "host-a", "TOKEN": SECRET}, "HOST_AGENT_URL is required"),
        ({"URL": "http://127.0.0.1:9", "HOST_ID": "h", "TOKEN": SECRET, "DEVICES": "sim:a,bogus:b"},
         "unknown device driver 'bogus'"),
    ],
)
def test_python_m_agent_exits_nonzero_with_one_line(tmp_path: Path, values: dict[str, str], needle: str) -> None:
    done = _run_agent(tmp_path, **values)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tether agent: configuration error: ")
    assert needle in lines[0]
    assert SECRET not in done.stderr + done.stdout


def test_settings_are_a_plain_object_for_constructors() -> None:
    settings = AgentSettings(_env_file=None, url="http://c", host_id="h", token=SecretStr(SECRET))
    assert settings.legacy and settings.device_specs == []


@pytest.mark.parametrize(("value", "expected"), [
    (None, EXAMPLE_WORKFLOWS_DIR),  # unset: the shipped examples, so the README's workflow runs
    ("", EXAMPLE_WORKFLOWS_DIR),  # a template .env's empty line is "unset"
    ("none", None),
    (" NONE ", None),
])
def test_workflows_default_to_the_examples_and_none_turns_them_off(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: Path | None
) -> None:
    legacy(monkeypatch, **({} if value is None else {"WORKFLOWS_DIR": value}))
    assert load_settings().workflows_dir == expected
