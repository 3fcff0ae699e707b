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
another are also the least a dispatch doing the contract's work costs.

The upload floor is the least an artifact's upload costs: ``PUT /blob/{name}`` streams the body
to a temporary file, hashing it, renames the file to its SHA-256 in the folder of
``COORDINATOR_ARTIFACTS_DIR`` and runs one script (where Tether records the description).
``PUT /held/{name}`` is its control for memory: it reads the body whole before writing it, as a
server that does not stream would.

The parking floor is the least a waiting long-poll holds: ``POST /park`` waits on one future
and one timer, with nothing else, until its ``wait_s`` is up (``GET /parked`` counts them).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
from collections.abc import AsyncIterator

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


def create_floor_app(settings: Settings) -> Starlette:
    transport, _ = open_redis(settings)
    redis = transport.client
    sha: list[str] = []
    queue = settings.key_prefix + ":floor-dispatch"
    lifecycle = LifecycleFloor(redis, settings.key_prefix)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sha.append(await redis.script_load(TRIVIAL_SCRIPT))
        sha.append(await redis.script_load(PUSH_SCRIPT))
        await lifecycle.load_scripts()
        try:
            yield
        finally:
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

    def json(body: bytes, status_code: int = 200) -> Response:
        return Response(body, status_code=status_code, media_type="application/json")

    async def create(request: Request) -> Response:
        body = orjson.loads(await request.body())
        return json(await lifecycle.create(body.pop("device_id"), body), 201)

    inbox = lifecycle.inbox(secrets.token_hex(8))

    async def claim(request: Request) -> Response:
        """The lifecycle floor's claim; with ``wait_s``, a poll that finds nothing waits for a
        create to push onto this process's inbox (its own BLMPOP: the floor serves one such poll
        at a time), then claims again."""
        await request.body()
        host, wait_s = request.path_params["host"], float(request.query_params.get("wait_s", "0"))
        assignment = await lifecycle.claim(host, inbox if wait_s else "", int(wait_s * 1000))
        if assignment is None and wait_s and await blocking_pop(inbox, wait_s):
            assignment = await lifecycle.claim(host)
        return Response(status_code=204) if assignment is None else json(assignment)

    async def renew(request: Request) -> Response:
        body = orjson.loads(await request.body())
        expires = await lifecycle.renew(request.path_params["host"], request.path_params["lease"], body["task_id"],
                                        body["attempt"], orjson.dumps(body["progress"]))
        return json(orjson.dumps({"lease_expires_at_ms": expires}))

    async def result(request: Request) -> Response:
        body = orjson.loads(await request.body())
        recorded = await lifecycle.result(request.path_params["host"], body.pop("lease_id"), body.pop("task_id"),
                                          body.pop("attempt"), orjson.dumps(body))
        return json(orjson.dumps({"recorded_at_ms": recorded}))

    lifecycle_routes = [
        Route("/api/v1/tasks", create, methods=["POST"]),
        Route("/internal/v1/hosts/{host}/claim", claim, methods=["POST"]),
        Route("/internal/v1/hosts/{host}/leases/{lease}/renew", renew, methods=["POST"]),
        Route("/internal/v1/hosts/{host}/results", result, methods=["POST"]),
    ]

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
