"""`odradek ui`: the dashboard's aiohttp server.

Routes: ``/`` the page, ``/static/`` its script and styles (shipped in the package: no CDN, the
machine may be offline), ``/api/state`` every section as one JSON object (for scripts and
tests), ``/api/events`` the same sections as server-sent events, each sent again when it
changes. Server-sent events rather than websockets: the stream only goes one way, and browsers
reconnect an EventSource by themselves after the server restarts.

On a secured cluster every route is served over HTTPS to logged-in users of the cluster only
(access.py); the browser asks for the login once and sends it with every request, the event
stream's too.
"""
from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from aiohttp import web

from odradek.admin.errors import ClusterError
from odradek.ui.access import Access, LoginChecker, login_middleware
from odradek.ui.poller import ClusterSource, Poller

STATIC = Path(__file__).parent / "static"
#: a comment line this often keeps idle proxies from closing the event stream
KEEPALIVE_S = 15.0
POLLER = web.AppKey("poller", Poller)


def build_app(poller: Poller, checker: LoginChecker | None = None) -> web.Application:
    """The routes; each behind ``checker``'s login when given."""
    app = web.Application(middlewares=[login_middleware(checker)] if checker is not None else [])
    app[POLLER] = poller
    app.router.add_get("/", _index)
    app.router.add_get("/api/state", _state)
    app.router.add_get("/api/events", _events)
    app.router.add_static("/static/", STATIC)
    return app


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


async def _state(request: web.Request) -> web.Response:
    sections = request.app[POLLER].sections
    body = "{" + ",".join(f'"{name}":{data}' for name, data in sections.items()) + "}"
    return web.Response(text=body, content_type="application/json")


async def _events(request: web.Request) -> web.StreamResponse:
    poller = request.app[POLLER]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    queue = poller.subscribe()
    try:
        while True:
            try:
                name, data = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
            except asyncio.TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if not name:  # dropped for falling behind: the browser reconnects
                break
            await response.write(f"event: {name}\ndata: {data}\n\n".encode())
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        poller.unsubscribe(queue)
    return response


async def run(source: ClusterSource, host: str, port: int, interval: float = 1.0, access: Access | None = None) -> None:
    """Serve until SIGINT or SIGTERM, over TLS and behind a login as ``access`` says (plain HTTP
    for all without it). ClusterError (for the CLI's one-line error) when ZooKeeper cannot be
    reached or the port is taken."""
    access = access or Access()
    poller = Poller(source, zk_interval=interval)
    await poller.start()
    checker = LoginChecker(access.security, poller.bootstrap) if access.security is not None else None
    runner = web.AppRunner(build_app(poller, checker), shutdown_timeout=1.0)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port, ssl_context=access.ssl_context).start()
        except OSError as exc:
            raise ClusterError(f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}") from None
        bound = runner.addresses[0][1] if runner.addresses else port  # --port 0: the one picked
        login = ", login: a user of the cluster" if checker is not None else ""
        print(f"odradek ui: {access.scheme}://{host}:{bound}/ (ZooKeeper {source.zookeeper}{login})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
        await poller.stop()


def serve(source: ClusterSource, host: str, port: int, interval: float = 1.0, access: Access | None = None) -> None:
    asyncio.run(run(source, host, port, interval, access))
    sys.stdout.flush()
