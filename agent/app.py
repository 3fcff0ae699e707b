"""Start-up in the order the design requires, then the loops.

settings → identity (legacy, or managed: stored or enrolled) → discover local devices → enroll
them (managed) and bind the ``DeviceManager`` to cloud ids → heartbeat, claim and device loops
(devices found later, and a managed host's devices again after the coordinator forgot one, are
enrolled through the same ``DeviceEnroller``). A shutdown signal during start-up abandons it and
the agent exits 0.

When the coordinator refuses the host's credential (401: revoked, or its Redis lost this host),
the agent says so in one line and exits 1; a managed host with ``HOST_AGENT_ENROLLMENT_TOKEN`` set
first replays its enrollment (``identity.reenroll``) and, if that makes a new host, starts again
as it. At most once per process: a second refusal, or a refused replay, exits.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from importlib import metadata
from urllib.parse import urlsplit

import httpx

from agent.client import CoordinatorClient
from agent.executor import RuntimeExecutor
from agent.host import EXIT_FATAL, EXIT_OK, HostAgent
from agent.host_config import HostConfig
from agent.identity import (
    CredentialRefused,
    DeviceEnroller,
    HostIdentity,
    StartupError,
    enroll_devices,
    reenroll,
    resolve_identity,
)
from agent.retry import RetryPolicy
from agent.runtime import (
    EXAMPLE_WORKFLOWS_DIR,
    DeviceManager,
    DriverError,
    TaskRunner,
    WorkflowRunner,
    make_planner,
)
from agent.runtime.task import Planner
from agent.settings import ENV_PREFIX, AgentSettings

log = logging.getLogger("agent")

_REFUSED = "the coordinator rejected this host's credential (401): revoked, or unknown to it (its Redis lost its data?)"


def plain_http_remote_host(url: str) -> str | None:
    """The host of a plain ``http://`` URL that leaves this machine (not 127.0.0.0/8, ``::1`` or
    ``localhost``), else ``None``: the host token would cross the network unencrypted."""
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".").lower()
    if parts.scheme.lower() != "http" or host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass  # a name other than localhost: it may resolve anywhere
    return host


def url_for_log(url: str) -> str:
    """``url`` without user info, query or fragment: none of those belong in a log line."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def agent_version() -> str:
    try:
        return metadata.version("tether")
    except metadata.PackageNotFoundError:
        return "0.0.0"


async def run_agent(
    settings: AgentSettings,
    shutdown: asyncio.Event,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    retry_policy: RetryPolicy | None = None,
) -> int:
    """Run the agent until ``shutdown`` is set; return the process exit code.

    ``retry_policy`` defaults to the standard base with ``settings.backoff_cap_s`` (tests pass a
    faster one). Raises ``ConfigError`` / ``StartupError`` when start-up cannot complete."""
    version = agent_version()
    client = CoordinatorClient(
        settings.url or "",
        transport=transport,
        timeout=httpx.Timeout(settings.request_timeout_s),
        user_agent=f"tether-agent/{version}",
    )
    async with client:
        url = settings.url or ""
        log.info("tether agent %s starting; coordinator %s", version, url_for_log(url))
        insecure_host = plain_http_remote_host(url)
        if insecure_host is not None:
            log.warning(
                "HOST_AGENT_URL is plain http:// to %s, not a loopback address: the host's "
                "credential crosses the network unencrypted; use https://",
                insecure_host,
            )
        retry_policy = retry_policy or RetryPolicy(cap_s=settings.backoff_cap_s)
        if not settings.device_specs:
            log.warning("%sDEVICES is empty: this host reports no device and gets no work; set it to "
                        "driver:local_id pairs, such as sim:phone-1,sim:phone-2 or adb:*", ENV_PREFIX)

        async def start(refused: HostIdentity | None) -> tuple[HostIdentity, HostAgent, Planner]:
            """Build the agent; ``refused``: an identity the coordinator refused, to enroll again."""
            if refused is None:
                identity = await resolve_identity(settings, client, retry_policy)
            else:
                try:
                    identity = await reenroll(settings, client, retry_policy, refused)
                except StartupError as exc:
                    raise StartupError(
                        f"{_REFUSED}; enrolling again with {ENV_PREFIX}ENROLLMENT_TOKEN failed: {exc}"
                    ) from None
                log.warning("%s (host %s); enrolled again with %sENROLLMENT_TOKEN as host %s",
                            _REFUSED, refused.host_id, ENV_PREFIX, identity.host_id)
            host = client.host(identity.host_id, identity.token)
            try:
                manager = await DeviceManager.discover(settings.device_specs, adb_path=settings.adb_path)
            except DriverError as exc:
                raise StartupError(f"device discovery failed: {exc}") from None
            local = manager.local_devices()
            id_map = await enroll_devices(identity, host, local, settings.state_dir, retry_policy)
            manager.bind(id_map)
            enroller = DeviceEnroller(identity, host, settings.state_dir)
            planner = make_planner(
                settings.planner,
                settings.llm_base_url,
                settings.llm_model,
                settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
            )
            workflows = WorkflowRunner(settings.workflows_dir) if settings.workflows_dir else None
            log_workflows(workflows)
            executor = RuntimeExecutor(manager, TaskRunner(planner), workflows, enroll=enroller.enroll)
            config = HostConfig.from_settings(settings, version=version, retry_policy=retry_policy,
                                              managed=identity.managed)
            kind = "managed" if identity.managed else "legacy"
            devices = ", ".join(sorted(id_map.values())) or "none"

            def ready() -> None:  # once the coordinator has answered a heartbeat: it knows this host
                log.info("host %s (%s) ready with %d device(s): %s", identity.host_id, kind, len(id_map), devices)

            agent = HostAgent(host, executor, config, on_ready=ready)
            log.info("host %s (%s) started with %d device(s): %s; waiting for the coordinator to answer "
                     "a heartbeat", identity.host_id, kind, len(id_map), devices)
            return identity, agent, planner

        refused: HostIdentity | None = None
        may_reenroll = settings.enrollment_token is not None  # once per process: then it is final
        while True:
            starting = asyncio.create_task(start(refused))
            stopping = asyncio.create_task(shutdown.wait())
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
                log.info("shutdown requested during start-up; exiting")
                return EXIT_OK
            stopping.cancel()
            await asyncio.gather(stopping, return_exceptions=True)
            try:
                identity, agent, planner = starting.result()
            except CredentialRefused as exc:  # the stored identity, refused at start-up
                if not may_reenroll:
                    raise
                may_reenroll, refused = False, exc.identity
                continue
            except StartupError as exc:
                if refused is None:
                    raise
                log.error("stopped: %s", exc)  # enrolling again failed: the one line that says so
                return EXIT_FATAL
            # The agent's own stop (a 401, a crashed loop) must not stop the next start.
            stop = asyncio.Event()
            follow = asyncio.create_task(_follow(shutdown, stop))
            try:
                code = await agent.run(stop)
            finally:
                follow.cancel()
                await planner.aclose()
            if not agent.credential_refused:
                return code
            if not may_reenroll or not identity.managed or shutdown.is_set():
                log.error("stopped: %s%s", _REFUSED, _hint(settings, identity, refused is not None))
                return EXIT_FATAL
            may_reenroll, refused = False, identity


def log_workflows(runner: WorkflowRunner | None) -> None:
    """One line at start: which workflows this agent can run, and the folder they come from, so
    a ``workflow_not_found`` can be told from the log alone. (The folder is read again at each
    run: a file dropped in later is run without a restart, but not listed here.)"""
    if runner is None:
        log.info("workflows: none (%sWORKFLOWS_DIR=none)", ENV_PREFIX)
        return
    names = ", ".join(sorted(runner.workflows())) or "none (no valid *.json file there)"
    if runner.workflows_dir == EXAMPLE_WORKFLOWS_DIR:
        log.info("workflows: %s, the examples from %s (set %sWORKFLOWS_DIR to a folder of your own, "
                 "or to none)", names, runner.workflows_dir, ENV_PREFIX)
    else:
        log.info("workflows: %s, from %s", names, runner.workflows_dir)


async def _follow(outer: asyncio.Event, inner: asyncio.Event) -> None:
    await outer.wait()
    inner.set()


def _hint(settings: AgentSettings, identity: HostIdentity, reenrolled: bool) -> str:
    """What the operator can do about a refused credential, for the one line that says so."""
    if not identity.managed:
        return f"; check {ENV_PREFIX}HOST_ID and {ENV_PREFIX}TOKEN"
    if reenrolled:
        return "; this host was enrolled again once since it started, and is not enrolled twice"
    return f"; set {ENV_PREFIX}ENROLLMENT_TOKEN to a valid enrollment token to enroll this host again"
