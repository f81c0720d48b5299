"""HTTP client for the runner protocol (docs/runner-protocol.md).

urllib and JSON only. Connection errors, timeouts and 5xx answers are retried
with exponential backoff and jitter: every call is safe to repeat (progress
only extends a lease, results are idempotent by job and attempt, a repeated
fail gets not-held). 4xx answers are never retried; the protocol's error
codes become exceptions the agent acts on.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

API = "/api/v1/runner/"


class ProtocolError(Exception):
    """The service refused a call (4xx); detail says what happened and what to do."""

    def __init__(self, status: int, code: str, detail: str, endpoint: str) -> None:
        super().__init__(f"{endpoint}: {status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.endpoint = endpoint


class BadToken(ProtocolError):
    """401: the token is missing or unknown. Nothing will work until it is fixed."""


class NotHeld(ProtocolError):
    """409 not-held: the job is no longer leased to us at this attempt."""


class Duplicate(ProtocolError):
    """409 duplicate: results for this job and attempt are already stored."""


class Invalid(ProtocolError):
    """422 invalid: the body was malformed."""


class TooLarge(ProtocolError):
    """413 too-large: the body is over the service's upload limit; send less."""


class ServerUnavailable(Exception):
    """Connection errors or 5xx answers outlasted every retry."""


class BadAnswer(Exception):
    """A 2xx answer that is not what the protocol says (not JSON, wrong shape)."""


class ArtifactError(Exception):
    """A download whose size or sha256 does not match the claim."""


# Worth retrying: the service may be restarting, or the network blinked.
_TRANSIENT = (
    urllib.error.URLError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
    socket.timeout,  # not yet an alias of TimeoutError on Python 3.9
)

# By code, whatever the status: the protocol documents 409 not-held, and an
# artifact download for a job we no longer hold is refused the same way.
_ERRORS: dict[str, type[ProtocolError]] = {
    "not-held": NotHeld,
    "duplicate": Duplicate,
    "invalid": Invalid,
}


class Client:
    def __init__(
        self,
        server: str,
        token: str,
        timeout: float = 30.0,
        retries: int = 6,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        api: str = API,
    ) -> None:
        if not server.startswith(("http://", "https://")):
            raise ValueError(f"server URL must start with http:// or https://, got {server!r}")
        self.server = server.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        # The runner protocol's calls by default; build machines (kperf_kbuild.builder) speak /api/v1/builder/.
        self.api = api

    # -- the protocol ------------------------------------------------------

    def heartbeat(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self.post_json("heartbeat", payload)

    def claim(self) -> dict[str, Any] | None:
        job = self.post_json("claim", {}).get("job")
        if job is not None and not isinstance(job, dict):
            raise BadAnswer(f"claim answered a job that is not an object: {job!r}")
        return job

    def progress(self, job_id: int, payload: dict[str, Any]) -> dict[str, Any]:
        return self.post_json(f"jobs/{job_id}/progress", payload)

    def results(self, job_id: int, payload: dict[str, Any]) -> dict[str, Any]:
        return self.post_json(f"jobs/{job_id}/results", payload)

    def fail(self, job_id: int, payload: dict[str, Any]) -> dict[str, Any]:
        return self.post_json(f"jobs/{job_id}/fail", payload)

    def download(
        self,
        url: str,
        cache_dir: Path,
        sha256: str,
        size: int | None = None,
        on_chunk: Callable[[int], None] | None = None,
    ) -> Path:
        """The artifact at url, from the cache when a verified copy is there.

        Files are cached by sha256, so a kernel shared by many jobs (base
        boots, bisection steps) is downloaded once.
        """
        sha256 = sha256.lower()
        cache_dir.mkdir(parents=True, exist_ok=True)
        target = cache_dir / sha256
        if target.is_file() and sha256_of(target) == sha256:
            return target
        tmp = cache_dir / f".{sha256}.{os.getpid()}.part"
        try:

            def fetch() -> None:
                digest = hashlib.sha256()
                received = 0
                request = self._request("GET", self._url(url), None)
                with (
                    urllib.request.urlopen(request, timeout=self.timeout) as response,
                    tmp.open("wb") as out,
                ):
                    while True:
                        block = response.read(1 << 20)
                        if not block:
                            break
                        out.write(block)
                        digest.update(block)
                        received += len(block)
                        if on_chunk is not None:
                            on_chunk(received)
                if size is not None and received != size:
                    raise ArtifactError(f"{url}: got {received} bytes, the claim said {size}")
                if digest.hexdigest() != sha256:
                    raise ArtifactError(f"{url}: sha256 {digest.hexdigest()} does not match the claim's {sha256}")

            self._with_retries(f"GET {url}", fetch)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                tmp.unlink()
        return target

    # -- plumbing ----------------------------------------------------------

    def post_json(self, endpoint: str, payload: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", endpoint, json.dumps(payload).encode(), "application/json")

    def put_bytes(self, endpoint: str, data: bytes) -> dict[str, Any]:
        """PUT a raw body (a chunk of a file); the JSON answer."""
        return self._call("PUT", endpoint, data, "application/octet-stream")

    def _call(self, method: str, endpoint: str, body: bytes, media: str) -> dict[str, Any]:
        url = self._url(self.api + endpoint)

        def call() -> dict[str, Any]:
            request = self._request(method, url, body, media)
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
            try:
                answer = json.loads(raw or b"{}")
            except ValueError as error:
                raise BadAnswer(f"{endpoint}: the answer is not JSON: {raw[:200]!r}") from error
            if not isinstance(answer, dict):
                raise BadAnswer(f"{endpoint}: the answer is not a JSON object: {answer!r}")
            return answer

        result: dict[str, Any] = self._with_retries(endpoint, call)
        return result

    def _url(self, path: str) -> str:
        return urllib.parse.urljoin(self.server, path.lstrip("/"))

    def _request(
        self, method: str, url: str, body: bytes | None, media: str = "application/json"
    ) -> urllib.request.Request:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/json",
        }
        if body is not None:
            headers["Content-Type"] = media
        return urllib.request.Request(url, data=body, headers=headers, method=method)

    def _with_retries(self, what: str, call: Callable[[], Any]) -> Any:
        delay = self.backoff
        for attempt in range(1, self.retries + 1):
            try:
                return call()
            except urllib.error.HTTPError as error:
                if error.code < 500:
                    raise _protocol_error(error, what) from None
                reason = f"HTTP {error.code}"
            except _TRANSIENT as error:
                reason = str(getattr(error, "reason", error))
            if attempt == self.retries:
                raise ServerUnavailable(
                    f"{what}: {reason}; gave up after {self.retries} attempts "
                    f"(is the service at {self.server} running?)"
                )
            # Jitter keeps a lab of runners from retrying in lockstep.
            pause = min(delay, self.max_backoff) * random.uniform(0.5, 1.0)
            log.warning(
                "%s: %s; retrying in %.1f s (attempt %d of %d)",
                what,
                reason,
                pause,
                attempt,
                self.retries,
            )
            self.sleep(pause)
            delay *= 2
        raise AssertionError("unreachable")


def _protocol_error(error: urllib.error.HTTPError, endpoint: str) -> ProtocolError:
    code, detail = "", ""
    try:
        body = json.loads(error.read() or b"{}")
        if isinstance(body, dict):
            code, detail = str(body.get("code", "")), str(body.get("detail", ""))
    except (ValueError, OSError):
        pass
    detail = detail or error.reason or "no detail"
    if error.code == 401:
        return BadToken(401, code or "bad-token", detail, endpoint)
    if error.code == 413:
        return TooLarge(413, code or "too-large", detail, endpoint)
    cls = _ERRORS.get(code, ProtocolError)
    return cls(error.code, code, detail, endpoint)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
