"""A loopback stand-in for the Honcho server: the subset of its v3 REST API that the
``honcho-ai`` SDK calls for the Hermes provider, with the SDK's own request and response
shapes (read from ``honcho/http/routes.py`` and ``honcho/api_types.py``).

No Honcho server can run here (it needs Postgres with pgvector, a deriver worker and LLM
keys), so the provider's tests run the real SDK against this. What it keeps: workspaces,
peers, sessions with their peers, messages, conclusions and peer cards, all in memory.
What it cannot do is reason: representations are built from the conclusions that exist
(created through the API or :meth:`FakeHoncho.add_conclusion`), "semantic" search is word
overlap, and the deriver is at most a stand-in: with ``deriver=True`` every message
becomes an explicit conclusion about its author, verbatim, at once.

Routes (all under ``/v3``)::

    POST   /workspaces                                   get or create a workspace
    POST   /workspaces/{ws}/peers                        get or create a peer
    GET    /workspaces/{ws}/peers/{peer}/card            peer card (?target=)
    GET    /workspaces/{ws}/peers/{peer}/context         representation + card (?target=, search_query, ...)
    POST   /workspaces/{ws}/peers/{peer}/representation  representation (search_query, ...)
    POST   /workspaces/{ws}/peers/{peer}/search          messages authored by the peer
    POST   /workspaces/{ws}/sessions                     get or create a session (with peers)
    POST   /workspaces/{ws}/sessions/{sid}/messages      add messages
    GET    /workspaces/{ws}/sessions/{sid}/context       recent messages within ?tokens, + peer_target view
    POST   /workspaces/{ws}/conclusions                  create conclusions
    DELETE /workspaces/{ws}/conclusions/{id}             delete a conclusion
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,512}$")  # the server's resource-name rule


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


def _rank(query: str, items: list[dict[str, Any]], key: str, limit: int) -> list[dict[str, Any]]:
    """Items sharing words with ``query``, most shared first (a stand-in for vectors)."""
    want = _words(query)
    scored = [(len(want & _words(item[key])), i, item) for i, item in enumerate(items)]
    return [item for score, _, item in sorted(scored, key=lambda t: (-t[0], t[1]))
            if score > 0][:limit]


class HonchoError(Exception):
    """An error answer: HTTP status and the server's ``detail``."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


@dataclass
class _Workspace:
    id: str
    created_at: str = field(default_factory=_now)
    peers: dict[str, dict[str, Any]] = field(default_factory=dict)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    conclusions: dict[str, dict[str, Any]] = field(default_factory=dict)
    cards: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (observer, observed)


class FakeHoncho:
    """The fake server. ``with FakeHoncho(api_key="k") as server: server.url``.

    ``api_key`` (optional) makes every request need ``Authorization: Bearer <key>``.
    ``deriver`` turns each message into an explicit conclusion about its author.
    :meth:`fail_next` answers the next requests with an error status.
    """

    def __init__(self, api_key: str | None = None, *, deriver: bool = False):
        self.api_key = api_key
        self.deriver = deriver
        self.requests: list[Recorded] = []
        self.workspaces: dict[str, _Workspace] = {}
        self._failures: list[int] = []
        self._delays: list[float] = []
        self._lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> FakeHoncho:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, payload = server.handle(self.command, self.path, raw,
                                                {k.lower(): v for k, v in self.headers.items()})
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _handle  # noqa: N815 - http.server naming

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def url(self) -> str:
        """The base URL to hand the SDK."""
        assert self._httpd is not None, "start the server with `with FakeHoncho() as server`"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # -- test helpers ----------------------------------------------------------------------

    def fail_next(self, count: int = 1, status: int = 500) -> None:
        """Answer the next ``count`` requests with ``status``."""
        with self._lock:
            self._failures.extend([status] * count)

    def delay_next(self, seconds: float, count: int = 1) -> None:
        """Answer the next ``count`` requests only after ``seconds``."""
        with self._lock:
            self._delays.extend([seconds] * count)

    def workspace(self, ws: str) -> _Workspace:
        """A workspace's state (created if missing)."""
        with self._lock:
            return self.workspaces.setdefault(ws, _Workspace(ws))

    def add_conclusion(self, ws: str, observer: str, observed: str, content: str) -> str:
        """What the deriver would have concluded; returns its id."""
        return self._create_conclusions(self.workspace(ws), [
            {"observer_id": observer, "observed_id": observed, "content": content}])[0]["id"]

    def set_card(self, ws: str, peer: str, card: list[str], target: str | None = None) -> None:
        """Set a peer card, as the deriver maintains it."""
        with self._lock:
            self.workspace(ws).cards[(peer, target or peer)] = list(card)

    def messages(self, ws: str, session: str | None = None) -> list[dict[str, Any]]:
        """Stored messages, oldest first."""
        with self._lock:
            return [m for m in self.workspace(ws).messages
                    if session is None or m["session_id"] == session]

    # -- dispatch --------------------------------------------------------------------------

    def handle(self, method: str, target: str, raw: bytes,
               headers: dict[str, str]) -> tuple[int, Any]:
        parts = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return 400, {"detail": "body is not JSON"}
        with self._lock:
            self.requests.append(Recorded(method, parts.path, query, body, headers))
            delay = self._delays.pop(0) if self._delays else 0.0
            failure = self._failures.pop(0) if self._failures else None
        if delay:
            time.sleep(delay)
        if failure is not None:
            return failure, {"detail": "injected failure"}
        if self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {"detail": "Invalid or missing API key"}
        try:
            with self._lock:
                return 200, self._route(method, parts.path, query, body or {})
        except HonchoError as exc:
            return exc.status, {"detail": exc.detail}

    def _route(self, method: str, path: str, q: dict[str, str], body: Any) -> Any:
        seg = path.strip("/").split("/")
        if seg[:1] != ["v3"] or seg[1:2] != ["workspaces"]:
            raise HonchoError(404, f"Not Found: {path}")
        rest = seg[2:]
        if method == "POST" and not rest:
            ws = self._ws(body.get("id"), create=True)
            return {"id": ws.id, "metadata": {}, "configuration": {}, "created_at": ws.created_at}
        ws = self._ws(rest[0])
        route = (method, *rest[1:])
        if route == ("POST", "peers"):
            return self._peer_out(ws, self._peer(ws, body.get("id"), create=True))
        if len(rest) == 4 and rest[1] == "peers":
            peer = self._peer(ws, rest[2])
            action = (method, rest[3])
            if action == ("GET", "card"):
                return {"peer_card": ws.cards.get((peer["id"], q.get("target") or peer["id"]))}
            if action == ("GET", "context"):
                target = q.get("target") or peer["id"]
                return {"peer_id": peer["id"], "target_id": target,
                        "representation": self._representation(ws, peer["id"], target, q),
                        "peer_card": ws.cards.get((peer["id"], target))}
            if action == ("POST", "representation"):
                target = body.get("target") or peer["id"]
                return {"representation": self._representation(ws, peer["id"], target, body)}
            if action == ("POST", "search"):
                mine = [m for m in ws.messages if m["peer_id"] == peer["id"]]
                return _rank(self._text(body, "query"), mine, "content", int(body.get("limit") or 10))
        if route == ("POST", "sessions"):
            session = self._session(ws, body.get("id"), create=True)
            for peer_id, config in (body.get("peers") or {}).items():
                self._peer(ws, peer_id, create=True)
                session["peers"][peer_id] = config or {}
            return self._session_out(ws, session)
        if len(rest) == 4 and rest[1] == "sessions":
            session = self._session(ws, rest[2])
            if (method, rest[3]) == ("POST", "messages"):
                return self._add_messages(ws, session, body.get("messages"))
            if (method, rest[3]) == ("GET", "context"):
                return self._session_context(ws, session, q)
        if route == ("POST", "conclusions"):
            return self._create_conclusions(ws, body.get("conclusions"))
        if method == "DELETE" and len(rest) == 3 and rest[1] == "conclusions":
            if ws.conclusions.pop(rest[2], None) is None:
                raise HonchoError(404, f"Conclusion {rest[2]} not found")
            return None
        raise HonchoError(404, f"Not Found: {method} {path}")

    # -- resources ---------------------------------------------------------------------------

    @staticmethod
    def _name(value: Any, what: str) -> str:
        if not isinstance(value, str) or not NAME.match(value):
            raise HonchoError(422, f"{what} id must match ^[a-zA-Z0-9_-]+$ (got {value!r})")
        return value

    @staticmethod
    def _text(body: Any, key: str) -> str:
        value = body.get(key) if isinstance(body, dict) else None
        if not isinstance(value, str) or not value:
            raise HonchoError(422, f"{key} is required")
        return value

    def _ws(self, ws_id: Any, create: bool = False) -> _Workspace:
        ws_id = self._name(ws_id, "workspace")
        if ws_id not in self.workspaces:
            if not create:
                raise HonchoError(404, f"Workspace {ws_id} not found")
            self.workspaces[ws_id] = _Workspace(ws_id)
        return self.workspaces[ws_id]

    def _peer(self, ws: _Workspace, peer_id: Any, create: bool = False) -> dict[str, Any]:
        peer_id = self._name(peer_id, "peer")
        if peer_id not in ws.peers:
            if not create:
                raise HonchoError(404, f"Peer {peer_id} not found")
            ws.peers[peer_id] = {"id": peer_id, "created_at": _now()}
        return ws.peers[peer_id]

    def _peer_out(self, ws: _Workspace, peer: dict[str, Any]) -> dict[str, Any]:
        return {"id": peer["id"], "workspace_id": ws.id, "created_at": peer["created_at"],
                "metadata": {}, "configuration": {}}

    def _session(self, ws: _Workspace, sid: Any, create: bool = False) -> dict[str, Any]:
        sid = self._name(sid, "session")
        if sid not in ws.sessions:
            if not create:
                raise HonchoError(404, f"Session {sid} not found")
            ws.sessions[sid] = {"id": sid, "created_at": _now(), "peers": {}}
        return ws.sessions[sid]

    def _session_out(self, ws: _Workspace, session: dict[str, Any]) -> dict[str, Any]:
        return {"id": session["id"], "is_active": True, "workspace_id": ws.id, "metadata": {},
                "configuration": {}, "created_at": session["created_at"]}

    def _add_messages(self, ws: _Workspace, session: dict[str, Any], items: Any) -> list[dict]:
        if not isinstance(items, list) or not 1 <= len(items) <= 100:
            raise HonchoError(422, "messages must hold 1 to 100 items")
        out = []
        for item in items:
            peer = self._peer(ws, item.get("peer_id"), create=True)
            session["peers"].setdefault(peer["id"], {})  # authors join the session
            content = item.get("content")
            if not isinstance(content, str):
                raise HonchoError(422, "message content must be a string")
            message = {"id": uuid.uuid4().hex, "content": content, "peer_id": peer["id"],
                       "session_id": session["id"], "metadata": item.get("metadata") or {},
                       "created_at": item.get("created_at") or _now(), "workspace_id": ws.id,
                       "token_count": max(1, len(content) // 4)}
            ws.messages.append(message)
            out.append(message)
            if self.deriver and content.strip():
                self._create_conclusions(ws, [{"observer_id": peer["id"], "observed_id": peer["id"],
                                               "content": content, "session_id": session["id"]}])
        return out

    def _create_conclusions(self, ws: _Workspace, items: Any) -> list[dict[str, Any]]:
        if not isinstance(items, list) or not 1 <= len(items) <= 100:
            raise HonchoError(422, "conclusions must hold 1 to 100 items")
        out = []
        for item in items:
            content = self._text(item, "content")
            observer = self._peer(ws, item.get("observer_id"))["id"]
            observed = self._peer(ws, item.get("observed_id"))["id"]
            if item.get("session_id"):
                self._session(ws, item["session_id"])
            conclusion = {"id": uuid.uuid4().hex, "content": content, "observer_id": observer,
                          "observed_id": observed, "session_id": item.get("session_id"),
                          "level": "explicit", "created_at": _now()}
            ws.conclusions[conclusion["id"]] = conclusion
            out.append(conclusion)
        return out

    def _representation(self, ws: _Workspace, observer: str, observed: str, opts: Any) -> str:
        pool = [c for c in ws.conclusions.values()
                if c["observer_id"] == observer and c["observed_id"] == observed]
        limit = int(opts.get("max_conclusions") or 25)
        if opts.get("search_query"):
            pool = _rank(str(opts["search_query"]), pool, "content",
                         int(opts.get("search_top_k") or limit))
        lines = [f"- {c['content']}" for c in pool[:limit]]
        return "## Explicit\n" + "\n".join(lines) if lines else ""

    def _session_context(self, ws: _Workspace, session: dict[str, Any],
                         q: dict[str, str]) -> dict[str, Any]:
        budget = int(q.get("tokens") or 100_000)
        picked: list[dict[str, Any]] = []
        for message in reversed([m for m in ws.messages if m["session_id"] == session["id"]]):
            if message["token_count"] > budget:
                break
            budget -= message["token_count"]
            picked.append(message)
        out: dict[str, Any] = {"id": session["id"], "messages": picked[::-1], "summary": None,
                               "peer_representation": None, "peer_card": None}
        target = q.get("peer_target")
        if target:
            observer = q.get("peer_perspective") or target
            out["peer_representation"] = self._representation(ws, observer, target, q) or None
            out["peer_card"] = ws.cards.get((observer, target))
        return out
