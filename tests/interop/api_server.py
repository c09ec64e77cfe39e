"""A real `airflow api-server` on the run's metastore, for the REST tier, and the stand-ins its
fault tests point our binary at instead.

The server is Airflow 3.3.2's own, from the venv this tier runs in (`airflow api-server --apps
core`), on the metastore `airflow db migrate` made for the run. It authenticates with
SimpleAuthManager: an `admin` and a `viewer` (`[core] simple_auth_manager_users`), their
passwords in a JSON file this module writes (random per run, so a leaked one is recognisable),
and a fixed JWT secret of 96 bytes (HS512 wants at least 64; Airflow's generated one has 16).
Never the all-admins mode, which lets a request through with no token: `start` checks that a
request without a token is refused before it hands the server out.

The server logs every request (`[http.access] … method=PUT path=/api/v2/… status_code=204`) to a
file in the run's home; `requests_since` reads them back, so a test can show that a request was
never sent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Users and roles, as `[core] simple_auth_manager_users` takes them.
USERS = {"admin": "admin", "viewer": "viewer"}

#: Long enough for HS512 (PyJWT warns below 64 bytes), fixed so tokens stay valid for the run.
JWT_SECRET = "state-store-interop-rest-tier-jwt-secret-" + "0123456789abcdef" * 4 + "-fixed"

#: How long the server may take to answer /api/v2/version: about 14 s on two idle cores.
READY_TIMEOUT_S = 90

#: How long SIGTERM has before SIGKILL.
STOP_GRACE_S = 15

_ACCESS = re.compile(r"\bmethod=(\S+) path=(\S*) query=(\S*) status_code=(\d+)")


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(
    method: str,
    url: str,
    body: Any = None,
    token: str | None = None,
    timeout: float = 30,
    raw: bytes | None = None,
) -> tuple[int, str, bytes]:
    """One request with urllib: (status, content type, body), 4xx and 5xx included. The body
    is `body` as JSON, or `raw` as it is (sent as JSON)."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


class ApiServer:
    """`airflow api-server` as a child of this process, stopped by its pid."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path, passwords: dict[str, str]) -> None:
        self.proc = proc
        self.port = port
        self.log = log
        self.passwords = passwords
        self.url = f"http://127.0.0.1:{port}"
        self.version: dict[str, Any] = {}
        self.ready_s = 0.0
        self._tokens: dict[str, str] = {}

    @classmethod
    def start(cls, home: Path, airflow: Path | None = None, env: dict[str, str] | None = None) -> ApiServer:
        """Starts the server on the metastore Airflow is configured with (the environment
        `conftest.py` set up, and `env`) and returns once `/api/v2/version` answers JSON.
        `airflow` is the CLI to run, by default the one beside this Python."""
        workdir = home / "api-server"
        workdir.mkdir(exist_ok=True)
        passwords = {user: f"{user}-pw-{secrets.token_urlsafe(12)}" for user in USERS}
        passwords_file = workdir / "passwords.json"
        passwords_file.write_text(json.dumps(passwords))
        passwords_file.chmod(0o600)
        log = workdir / "server.log"
        port = free_port()
        env = {
            **os.environ,
            **(env or {}),
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in USERS.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET,
            # Every access-log line reaches the file at once: `requests_since` reads it.
            "PYTHONUNBUFFERED": "1",
        }
        airflow = airflow or Path(sys.executable).with_name("airflow")
        started = time.monotonic()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                # One worker: one process of about 250 MB, and one place that logs requests.
                [str(airflow), "api-server", "--apps", "core", "-H", "127.0.0.1", "-p", str(port), "-w", "1"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                # Its own process group, so that a stop also reaches anything it forked.
                start_new_session=True,
            )
        server = cls(proc, port, log, passwords)
        try:
            server._wait_until_ready(started)
            server._check_auth_is_enforced()
        except BaseException:
            server.stop()
            raise
        server.ready_s = time.monotonic() - started
        return server

    def _wait_until_ready(self, started: float) -> None:
        problem = "no answer yet"
        while time.monotonic() - started < READY_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise AssertionError(f"airflow api-server exited {self.proc.returncode} before it answered\n{self.log_tail()}")
            try:
                status, ctype, body = fetch("GET", f"{self.url}/api/v2/version", timeout=5)
                if status == 200 and ctype.startswith("application/json"):
                    self.version = json.loads(body)
                    return
                problem = f"{status} {ctype}"
            except (OSError, ValueError) as e:
                problem = str(e)
            time.sleep(0.25)
        raise AssertionError(
            f"airflow api-server did not answer /api/v2/version within {READY_TIMEOUT_S}s ({problem})\n{self.log_tail()}"
        )

    def _check_auth_is_enforced(self) -> None:
        """The tier's auth tests mean nothing on a server that lets everyone in."""
        status, _, body = fetch("GET", f"{self.url}/api/v2/assets")
        assert status == 401, f"a request without a token got {status} {body[:200]!r}, not 401"
        status, _, _ = fetch("GET", f"{self.url}/auth/token")
        assert status == 403, f"GET /auth/token got {status}: the all-admins mode is on"

    def token(self, user: str = "admin") -> str:
        """A JWT for `user` from `POST /auth/token`, fetched once per run."""
        if user not in self._tokens:
            status, _, body = fetch(
                "POST", f"{self.url}/auth/token", {"username": user, "password": self.passwords[user]}
            )
            assert status == 201, f"POST /auth/token for {user}: {status} {body[:200]!r}"
            self._tokens[user] = json.loads(body)["access_token"]
        return self._tokens[user]

    def api(self, method: str, path: str, body: Any = None, user: str | None = "admin") -> tuple[int, Any]:
        """A call of the public API as `user`: (status, the JSON body or None)."""
        status, _, raw = fetch(method, f"{self.url}/api/v2{path}", body, None if user is None else self.token(user))
        return status, json.loads(raw) if raw else None

    # the server's log

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError as e:
            return f"(no server log: {e})"
        return "--- airflow api-server log (tail)\n" + "\n".join(text.splitlines()[-lines:])

    def mark(self) -> str:
        """A request of its own in the server's log, to tell the requests after it from those
        before; returns when the server has logged it."""
        marker = secrets.token_hex(8)
        fetch("GET", f"{self.url}/api/v2/version?mark={marker}")
        self._wait_for_mark(marker)
        return marker

    def requests_since(self, marker: str) -> list[tuple[str, str, str, int]]:
        """The requests the server logged after `mark()` returned `marker` and before a new
        mark: (method, path, query, status), the path as sent (percent-encoded)."""
        end = self.mark()
        seen: list[tuple[str, str, str, int]] = []
        recording = False
        for line in self.log.read_text(errors="replace").splitlines():
            m = _ACCESS.search(line)
            if not m:
                continue
            method, path, query, status = m.groups()
            if f"mark={marker}" in query:
                recording = True
                continue
            if f"mark={end}" in query:
                break
            if recording:
                seen.append((method, path, query, int(status)))
        return seen

    def _wait_for_mark(self, marker: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if f"mark={marker}" in self.log.read_text(errors="replace"):
                return
            time.sleep(0.05)
        raise AssertionError(f"the server did not log the marker request\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM to the server's pid, then SIGKILL to its process group after a grace."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


# ── stand-ins ─────────────────────────────────────────────────────────────────────────────────

#: An answer of a stand-in: (status, content type, body).
Answer = tuple[int, str, bytes]


def json_answer(status: int, body: Any) -> Answer:
    return status, "application/json", json.dumps(body).encode()


def version_answer(version: str = "3.3.2") -> Answer:
    return json_answer(200, {"version": version, "git_version": None})


def html_answer() -> Answer:
    return 200, "text/html; charset=utf-8", b"<!doctype html><html><head><title>Sign in</title></head><body>Sign in</body></html>"


@dataclasses.dataclass(frozen=True)
class Request:
    """A request a stand-in received."""

    method: str
    path: str  # with its query, as sent
    headers: dict[str, str]  # names in lower case
    body: bytes
    client_port: int  # one per connection


def answer_version_else_404(version: str = "3.3.2") -> Any:
    def answer(req: Request) -> Answer:
        if req.path.split("?")[0].endswith("/api/v2/version"):
            return version_answer(version)
        return json_answer(404, {"detail": "Not Found"})

    return answer


@contextlib.contextmanager
def stand_in(answer: Any = None) -> Iterator[tuple[str, list[Request]]]:
    """A web server on 127.0.0.1 that records every request and answers it with
    `answer(request)` (by default: `/api/v2/version` says 3.3.2, anything else is 404).
    Yields (base URL, the record)."""
    answer = answer or answer_version_else_404()
    seen: list[Request] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            headers = {name.lower(): value for name, value in self.headers.items()}
            body = self.rfile.read(length) if length else b""
            req = Request(self.command, self.path, headers, body, self.client_address[1])
            seen.append(req)
            status, ctype, raw = answer(req)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_PUT = do_PATCH = do_DELETE = do_POST = _answer  # noqa: N815 (http.server's names)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    # A short poll, so that the shutdown at the end of each test does not wait half a second.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def prefix_proxy(target: str, prefix: str) -> Iterator[tuple[str, list[Request]]]:
    """A reverse proxy that serves `target` under a path prefix, as Astronomer serves a
    deployment's API (`https://host/<prefix>/api/v2/...`): it forwards what starts with
    `prefix` without it, and answers anything else with the HTML page a front end shows.
    Yields (the prefixed base URL, the requests it received)."""

    def answer(req: Request) -> Answer:
        if not req.path.startswith(prefix + "/"):
            return html_answer()
        forwarded = urllib.request.Request(target + req.path[len(prefix) :], data=req.body or None, method=req.method)
        for name in ("authorization", "content-type", "accept"):
            if name in req.headers:
                forwarded.add_header(name, req.headers[name])
        try:
            with urllib.request.urlopen(forwarded, timeout=30) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read()

    with stand_in(answer) as (url, seen):
        yield url + prefix, seen


@contextlib.contextmanager
def silent_port() -> Iterator[str]:
    """A port that accepts connections (the kernel completes the handshake for the backlog) and
    never answers a byte. Yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def quote_segment(text: str) -> str:
    """A path segment as the REST API's clients send it: percent-encoded, nothing kept."""
    return urllib.parse.quote(text, safe="")
