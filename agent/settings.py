"""Host agent configuration: ``HOST_AGENT_*`` environment variables, and a ``.env`` file.

The names are part of the contract (DESIGN.md, "Configuration"). Secrets are ``SecretStr`` so
neither a ``repr`` nor a log line can show them. ``load_settings`` turns every problem into one
``ConfigError`` whose message is a single line naming the variable, never its value.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from agent.runtime import EXAMPLE_WORKFLOWS_DIR, DeviceSpec, parse_device_specs, validate_workflows_dir

ENV_PREFIX = "HOST_AGENT_"
IDENTITY_FILE = "identity.json"  # inside HOST_AGENT_STATE_DIR; see agent/identity.py
# ``HOST_AGENT_WORKFLOWS_DIR=none``: no workflows at all (unset: the shipped examples).
NO_WORKFLOWS = "none"


class ConfigError(Exception):
    """Bad configuration: the agent prints ``str(error)`` as one line and exits non-zero."""


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
    )

    url: str | None = None
    # Legacy ("static") host: both set, no enrollment, local device ids are the cloud ids.
    host_id: str | None = None
    token: SecretStr | None = None
    # Managed host: a one-time enrollment token plus a state directory for the identity.
    enrollment_token: SecretStr | None = None
    state_dir: Path | None = None
    # Comma-separated ``driver:local_id``: ``sim:phone-1,sim:phone-2`` or ``adb:*``.
    devices: str = ""
    # Unset: the examples shipped with the agent, so the README's first workflow runs as written;
    # ``none``: no workflows (every workflow task then fails ``workflow_not_found``).
    workflows_dir: Path | None = EXAMPLE_WORKFLOWS_DIR
    poll_wait_s: int = Field(default=25, ge=0, le=600)
    # Only until the coordinator's first heartbeat answer: from then on its interval is followed.
    heartbeat_interval_s: float = Field(default=15.0, gt=0)
    planner: Literal["scripted", "openai"] = "scripted"
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: SecretStr | None = None
    # Additions: how long running work may take to finish after SIGTERM before it is stopped,
    # labels put on every device in the heartbeat (and on the enrollment), the hostname
    # reported, the ``adb`` executable, and how often device state is re-read (one
    # ``adb devices -l`` per round; nothing at all on a sim-only host).
    shutdown_grace_s: float = Field(default=30.0, ge=0)
    labels: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    hostname: str = Field(default_factory=socket.gethostname)
    adb_path: str = "adb"
    device_refresh_s: float = Field(default=5.0, gt=0)
    request_timeout_s: float = Field(default=10.0, gt=0)
    backoff_cap_s: float = Field(default=30.0, gt=0)
    # Which evidence of each run goes up to the coordinator (agent/artifacts.py).
    artifacts: Literal["off", "failures", "all"] = "all"

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    # An empty ``HOST_AGENT_X=`` line (a template .env) means "not set", not an empty value: each
    # setting then takes its default (None, the example workflows, no labels).
    @field_validator(
        "host_id",
        "token",
        "enrollment_token",
        "state_dir",
        "llm_base_url",
        "llm_model",
        "llm_api_key",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if _blank(value) else value

    @field_validator("workflows_dir", mode="before")
    @classmethod
    def _workflows_default_or_none(cls, value: object) -> object:
        if _blank(value):
            return EXAMPLE_WORKFLOWS_DIR
        if isinstance(value, str) and value.strip().lower() == NO_WORKFLOWS:
            return None
        return value

    @field_validator("labels", mode="before")
    @classmethod
    def _labels_json(cls, value: object) -> object:
        if _blank(value):
            return {}
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError('must be a JSON object such as {"site": "berlin"}') from None
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ValueError('must be a JSON object of strings such as {"site": "berlin"}')
        return value

    @field_validator("devices")
    @classmethod
    def _devices_parse(cls, value: str) -> str:
        parse_device_specs(value)  # raises ValueError with a one-line reason
        return value

    @field_validator("workflows_dir")
    @classmethod
    def _workflows_dir_exists(cls, value: Path | None) -> Path | None:
        return None if value is None else validate_workflows_dir(value)

    @model_validator(mode="after")
    def _identity_and_planner(self) -> AgentSettings:
        if self.url is None:
            raise ValueError(f"{ENV_PREFIX}URL is required (the coordinator's base URL)")
        if (self.host_id is None) != (self.token is None):
            raise ValueError(
                f"{ENV_PREFIX}HOST_ID and {ENV_PREFIX}TOKEN must be set together (legacy host)"
            )
        if self.host_id is None:
            if self.state_dir is None:
                raise ValueError(
                    f"no host identity: set {ENV_PREFIX}HOST_ID and {ENV_PREFIX}TOKEN (legacy host), "
                    f"or {ENV_PREFIX}ENROLLMENT_TOKEN and {ENV_PREFIX}STATE_DIR (managed host)"
                )
            if self.enrollment_token is None and not (self.state_dir / IDENTITY_FILE).is_file():
                raise ValueError(
                    f"{ENV_PREFIX}STATE_DIR holds no enrolled identity and "
                    f"{ENV_PREFIX}ENROLLMENT_TOKEN is not set"
                )
        if self.planner == "openai" and (self.llm_base_url is None or self.llm_model is None):
            raise ValueError(
                f"{ENV_PREFIX}PLANNER=openai needs {ENV_PREFIX}LLM_BASE_URL and {ENV_PREFIX}LLM_MODEL"
            )
        return self

    @property
    def legacy(self) -> bool:
        return self.host_id is not None

    @property
    def device_specs(self) -> list[DeviceSpec]:
        return parse_device_specs(self.devices)


def load_settings(**overrides: Any) -> AgentSettings:
    """Read the settings (environment, then ``.env``) or raise a one-line ``ConfigError``."""
    try:
        return AgentSettings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None


def _one_line(exc: ValidationError) -> str:
    """Name each bad variable and what is wrong with it; never echo the value itself."""
    parts = []
    for error in exc.errors(include_input=False, include_url=False):
        message = str(error["msg"]).removeprefix("Value error, ")
        loc = [str(part) for part in error["loc"] if not isinstance(part, int)]
        if loc:
            parts.append(f"{ENV_PREFIX}{loc[0].upper()}: {message}")
        else:
            parts.append(message)
    return "; ".join(" ".join(part.split()) for part in parts)


def _blank(value: object) -> bool:
    """An empty or all-blank ``HOST_AGENT_X=`` line: the setting is not set."""
    return isinstance(value, str) and not value.strip()
