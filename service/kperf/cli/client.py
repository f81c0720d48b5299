"""The `kperf` command's HTTP client and settings, shared by every sub-command.

Settings come from ~/.config/kperf/config.json (written by `kperf login`),
overridden by KPERF_SERVER and KPERF_TOKEN.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import requests


class CliError(Exception):
    pass


class Unreachable(CliError):
    """The server did not answer, or a proxy said it is down (502, 503, 504): worth asking again later."""


# What a proxy in front of kperf answers while the service restarts.
TRANSIENT_STATUS = (502, 503, 504)


def config_path() -> Path:
    return Path(os.environ.get("KPERF_CONFIG", Path.home() / ".config" / "kperf" / "config.json"))


def load_config() -> dict[str, str]:
    path = config_path()
    cfg: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    if os.environ.get("KPERF_SERVER"):
        cfg["server"] = os.environ["KPERF_SERVER"]
    if os.environ.get("KPERF_TOKEN"):
        cfg["token"] = os.environ["KPERF_TOKEN"]
    return cfg


class Client:
    def __init__(self, server: str, token: str | None) -> None:
        self.server = server.rstrip("/")
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.server}/api/v1{path}"
        try:
            resp = self.session.request(method, url, json=body, timeout=60)
        except requests.RequestException as e:
            raise Unreachable(f"cannot reach {self.server}: {e}") from None
        if resp.status_code in TRANSIENT_STATUS:
            raise Unreachable(f"{method} {path}: {resp.status_code}: {resp.reason or 'the server is unavailable'}")
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail", resp.text)
            except ValueError:
                detail = resp.text[:500]
            raise CliError(f"{method} {path}: {resp.status_code}: {detail}")
        return resp.json()


def client_from_config(require_token: bool = True) -> Client:
    cfg = load_config()
    if "server" not in cfg:
        raise CliError("no server configured: run `kperf login --server URL` or set KPERF_SERVER")
    if require_token and not cfg.get("token"):
        raise CliError("not logged in: run `kperf login` or set KPERF_TOKEN")
    return Client(cfg["server"], cfg.get("token"))
