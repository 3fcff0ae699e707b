"""The floor: a bare Starlette endpoint doing one EVALSHA of a trivial script.

One HTTP round trip plus one script on the same Redis is the least any coordinator call can cost
on this machine. It runs in its own process under the same uvicorn settings as the coordinator
(`coordinator/__main__.py`) and with the coordinator's own Redis pool (`open_redis`), reads the
request body and answers JSON, so the ratio to it isolates the coordinator's own work.

The dispatch floor is the least a dispatch through HTTP can cost: ``POST /push`` runs one script
that pushes onto a list, as a create queues work; ``POST /pop``, on another process, waits in
BLMPOP on that list, then runs one script, as a woken poll claims, and answers. Every hop Tether's
create -> wake-up -> claim -> answer makes is there, and none of its work.

The lifecycle floor serves the contract's four lifecycle calls on their own paths (create, claim,
renew, result), each request one script of bench/floor_lifecycle.py, the fewest Redis commands
the contract allows: what two such processes sustain under the same wrk lifecycles as row 3 is
the least a lifecycle through HTTP can cost here. Its claim waits when asked (``wait_s``), woken
through its process's inbox as Tether's is, so a create on one process and a waiting claim on
another are also the least a dispatch doing the contract's work costs. For the peers harness's
floor column (bench/peers/tether.py) it also takes the agent's heartbeat (its devices become
free), creates for any device (queued while none is free), and a result with ``"next": true``,
which leases the device's next queued task in the same script and answers it as
``next_assignment`` (eager dispatch).

The upload floor is the least an artifact's upload costs: ``PUT /blob/{name}`` streams the body
to a temporary file, hashing it, renames the file to its SHA-256 in the folder of
``COORDINATOR_ARTIFACTS_DIR`` and runs one script (where Tether records the description).
``PUT /held/{name}`` is its control for memory: it reads the body whole before writing it, as a
server that does not stream would.

The relay floor is the least a live session's command round trip costs: ``POST
/relay/{sid}/send`` (the operator's, on one process) runs one script that queues the command,
wakes the process where the host's poll waits and registers its own wait, then waits for its
wake-up and runs one script that takes the answer; ``POST /relay/{sid}/poll`` (the host's, on the
other process; ``?answered=1`` delivers the answer of the last command first, waking the
operator's process) runs one script that takes the next command or registers the wait, and when
woken runs it again. Each process wakes its waits from one inbox read by one blocking pop, as
Tether's does: every hop of Tether's round trip (two cross-process wake-ups, a script at each
step, four HTTP messages) and none of its work.

The parking floor is the least a waiting long-poll holds: ``POST /park`` waits on one future
and one timer, with nothing else, until its ``wait_s`` is up (``GET /parked`` counts them).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.floor_lifecycle import LifecycleFloor
from coordinator.settings import Settings
from coordinator.transport.open import open_redis

TRIVIAL_SCRIPT = "return 1"
PUSH_SCRIPT = "return redis.call('LPUSH', KEYS[1], ARGV[1])"
POP_WAIT_S = 10
# The relay floor's scripts (see the docstring). KEYS: the command list, the host's registration,
# the answer list, the operator's registration; ARGV: the session's topic, this process's inbox.
RELAY_SEND = """
redis.call('RPUSH', KEYS[1], 'c')
local waiter = redis.call('GET', KEYS[2])
if waiter then redis.call('DEL', KEYS[2]); redis.call('RPUSH', waiter, ARGV[1]) end
redis.call('SET', KEYS[4], ARGV[2], 'PX', 60000)
return 1"""
# ARGV[3]: '1' when the poll delivers the last command's answer.
RELAY_POLL = """
if ARGV[3] == '1' then
  redis.call('RPUSH', KEYS[3], 'a')
  local waiter = redis.call('GET', KEYS[4])
  if waiter then redis.call('DEL', KEYS[4]); redis.call('RPUSH', waiter, ARGV[1]) end
end
if redis.call('LPOP', KEYS[1]) then return 1 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', 60000)
return 0"""
RELAY_TAKE = "return redis.call('LPOP', KEYS[1])"


def create_floor_app(settings: Settings) -> Starlette:
    transport, _ = open_redis(settings)
    # The process's inbox reader blocks on a connection of its own transport, so that a
    # ``/pop`` (which blocks on the main one's) never shares one with it.
    wakes, _ = open_redis(settings)
    redis = transport.client
    sha: list[str] = []
    queue = settings.key_prefix + ":floor-dispatch"
    lifecycle = LifecycleFloor(redis, settings.key_prefix)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sha.append(await redis.script_load(TRIVIAL_SCRIPT))
        sha.append(await redis.script_load(PUSH_SCRIPT))
        await lifecycle.load_scripts()
        relay_sha.extend([await redis.script_load(script) for script in (RELAY_SEND, RELAY_POLL, RELAY_TAKE)])
        try:
            yield
        finally:
            for task in reader:  # started by the first waiting request
                task.cancel()
            await wakes.aclose()
            await transport.aclose()

    async def floor(request: Request) -> Response:
        await request.body()
        value = await redis.evalsha(sha[0], 0)
        return Response(orjson.dumps({"value": value}), media_type="application/json")

    async def push(request: Request) -> Response:
        await request.body()
        value = await redis.evalsha(sha[1], 1, queue, "work")
        return Response(orjson.dumps({"value": value}), status_code=201, media_type="application/json")

    async def blocking_pop(key: str, timeout: float) -> bool:
        """Whether a value came to ``key`` within ``timeout``: the transport's blocking pop, as
        the coordinator's wake-up reader does (one at a time: the floor's probes wait one by one)."""
        return bool(await transport.blocking_pop(key, timeout, 1))

    async def pop(request: Request) -> Response:
        await request.body()
        if not await blocking_pop(queue, POP_WAIT_S):
            return Response(status_code=204)
        value = await redis.evalsha(sha[0], 0)
        return Response(orjson.dumps({"value": value}), media_type="application/json")

    blobs = settings.artifacts_dir.resolve() / "floor"

    async def blob(request: Request) -> Response:
        blobs.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        tmp = blobs / ("tmp-" + secrets.token_hex(16))
        with open(tmp, "wb") as file:  # noqa: ASYNC230 - as the coordinator's LocalBlobStore.put opens it
            if request.url.path.startswith("/held/"):
                whole = await request.body()
                digest.update(whole)
                file.write(whole)
            else:
                async for chunk in request.stream():
                    digest.update(chunk)
                    file.write(chunk)
        os.replace(tmp, blobs / digest.hexdigest())
        await redis.evalsha(sha[0], 0)
        return Response(orjson.dumps({"sha256": digest.hexdigest()}), status_code=201, media_type="application/json")

    # One inbox a process, read by one blocking pop, as Tether's: a create pushes the host of a
    # waiting claim, a relay step the topic of a waiting send or poll, and the reader wakes them.
    inbox = lifecycle.inbox(secrets.token_hex(8))
    waits: dict[str, list[asyncio.Event]] = {}
    reader: list[asyncio.Task[None]] = []

    async def read_inbox() -> None:
        while True:
            for topic in await wakes.blocking_pop(inbox, 1, 100):
                for event in waits.get(topic.decode(), ()):
                    event.set()

    async def wait_for(topic: str, event: asyncio.Event, step: Callable[[], Awaitable[bool]],
                       wait_s: float) -> bool:
        """``step()`` until it says done, again at each wake-up of ``topic``, for ``wait_s``."""
        if not reader:
            reader.append(asyncio.ensure_future(read_inbox()))
        waits.setdefault(topic, []).append(event)
        try:
            async with asyncio.timeout(wait_s):
                while not await step():
                    await event.wait()
                    event.clear()
            return True
        except TimeoutError:
            return False
        finally:
            waits[topic].remove(event)
            if not waits[topic]:
                del waits[topic]

    def json(body: bytes, status_code: int = 200) -> Response:
        return Response(body, status_code=status_code, media_type="application/json")

    async def create(request: Request) -> Response:
        body = orjson.loads(await request.body())
        return json(await lifecycle.create(body.pop("device_id", ""), body), 201)

    async def heartbeat(request: Request) -> Response:
        """The host's devices that are available become free (one ZADD): the floor's hosts
        heartbeat once, before any work, and name each device after the host."""
        body = orjson.loads(await request.body())
        free = [d["device_id"] for d in body["devices"] if d["status"] == "available"]
        if free:
            await lifecycle.add_free(free)
        return json(b'{"status":"ok"}')

    async def claim(request: Request) -> Response:
        """The lifecycle floor's claim; with ``wait_s``, a poll that finds nothing waits until a
        create for its host pushes onto this process's inbox, then claims again, as Tether's."""
        await request.body()
        host, wait_s = request.path_params["host"], float(request.query_params.get("wait_s", "0"))
        assignment: list[bytes] = []

        async def step() -> bool:
            claimed = await lifecycle.claim(host, inbox, int(wait_s * 1000))
            if claimed is not None:
                assignment.append(claimed)
            return claimed is not None

        if not wait_s:
            claimed = await lifecycle.claim(host)
            return Response(status_code=204) if claimed is None else json(claimed)
        await wait_for(host, asyncio.Event(), step, wait_s)
        return json(assignment[0]) if assignment else Response(status_code=204)

    async def renew(request: Request) -> Response:
        body = orjson.loads(await request.body())
        expires = await lifecycle.renew(request.path_params["host"], request.path_params["lease"], body["task_id"],
                                        body["attempt"], orjson.dumps(body["progress"]))
        return json(orjson.dumps({"lease_expires_at_ms": expires}))

    async def result(request: Request) -> Response:
        """With ``next``, the answer carries the device's next assignment (eager dispatch)."""
        body = orjson.loads(await request.body())
        host, lease_id, task_id, attempt = (request.path_params["host"], body.pop("lease_id"), body.pop("task_id"),
                                            body.pop("attempt"))
        if body.pop("next", False):
            return json(await lifecycle.result_next(host, lease_id, task_id, attempt, orjson.dumps(body)))
        recorded = await lifecycle.result(host, lease_id, task_id, attempt, orjson.dumps(body))
        return json(orjson.dumps({"recorded_at_ms": recorded}))

    lifecycle_routes = [
        Route("/api/v1/tasks", create, methods=["POST"]),
        Route("/internal/v1/hosts/{host}/heartbeat", heartbeat, methods=["PUT"]),
        Route("/internal/v1/hosts/{host}/claim", claim, methods=["POST"]),
        Route("/internal/v1/hosts/{host}/leases/{lease}/renew", renew, methods=["POST"]),
        Route("/internal/v1/hosts/{host}/results", result, methods=["POST"]),
    ]

    relay_sha: list[str] = []

    def relay_keys(sid: str) -> list[str]:
        base = f"{settings.key_prefix}:relay:{sid}"
        return [base + ":cmd", base + ":cmd-waiter", base + ":ans", base + ":ans-waiter"]


    async def relay_send(request: Request) -> Response:
        await request.body()
        sid = request.path_params["sid"]
        keys, topic, event = relay_keys(sid), "a>" + sid, asyncio.Event()
        sent: list[bool] = []

        async def step() -> bool:
            if not sent:
                sent.append(await redis.evalsha(relay_sha[0], 4, *keys, "c>" + sid, inbox))
                return False
            return await redis.evalsha(relay_sha[2], 1, keys[2]) is not None

        done = await wait_for(topic, event, step, POP_WAIT_S)
        return json(b'{"status":"done"}') if done else Response(status_code=202)

    async def relay_poll(request: Request) -> Response:
        await request.body()
        sid = request.path_params["sid"]
        keys, topic, event = relay_keys(sid), "c>" + sid, asyncio.Event()
        answered = [request.query_params.get("answered", "0")]

        async def step() -> bool:
            flag = answered.pop() if answered else "0"
            return bool(await redis.evalsha(relay_sha[1], 4, *keys, "a>" + sid, inbox, flag))

        done = await wait_for(topic, event, step, float(request.query_params.get("wait_s", "25")))
        return json(b'{"commands":[{"command_id":"c"}]}') if done else Response(status_code=204)

    relay_routes = [Route("/relay/{sid}/send", relay_send, methods=["POST"]),
                    Route("/relay/{sid}/poll", relay_poll, methods=["POST"])]

    parked = [0]

    async def park(request: Request) -> Response:
        await request.body()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        timer = loop.call_later(float(request.query_params.get("wait_s", "60")), future.set_result, None)
        parked[0] += 1
        try:
            await future
        finally:
            parked[0] -= 1
            timer.cancel()
        return Response(status_code=204)

    async def parked_count(request: Request) -> Response:
        return Response(orjson.dumps({"parked": parked[0]}), media_type="application/json")

    parking_routes = [Route("/park", park, methods=["POST"]), Route("/parked", parked_count, methods=["GET"])]

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    return Starlette(routes=[
        Route("/floor", floor, methods=["POST"]),
        Route("/push", push, methods=["POST"]),
        Route("/pop", pop, methods=["POST"]),
        Route("/blob/{name}", blob, methods=["PUT"]),
        Route("/held/{name}", blob, methods=["PUT"]),
        *lifecycle_routes,
        *parking_routes,
        *relay_routes,
        Route("/healthz", healthz, methods=["GET"]),
    ], lifespan=lifespan)


def serve(port: int) -> None:
    # The same uvicorn.run arguments as coordinator/__main__.py's serve command.
    uvicorn.run(
        create_floor_app(Settings()),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
        proxy_headers=False,
    )
