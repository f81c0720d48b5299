"""The service's mirrors, read-only over git's smart HTTP, for build machines (docs/builders.md).

A build machine that pulls (`kperf-builder`) has no way to the trees'
own hosts and needs none: it fetches the commit it builds from the
service's mirror, which already holds every branch, tracked commit and
applied patch series kperf builds. git's own `git http-backend` answers the
protocol (v2, so a commit on no branch is fetched by its sha, and each fetch
sends only the objects the machine's mirror lacks); this view only checks
the token, allows upload-pack alone, and relays.

It lives outside /api/ because git's requests and answers are not JSON.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections.abc import Iterator

from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from kperf.core.builds import machines
from kperf.core.models import Tree

log = logging.getLogger(__name__)

_SERVICES = {"info/refs", "git-upload-pack"}


def _plain(status: int, text: str) -> HttpResponse:
    # git prints the body of an error answer to the user of `git fetch`.
    return HttpResponse(text + "\n", status=status, content_type="text/plain; charset=utf-8")


def _environment(request: HttpRequest, mirror_root: str, path_info: str) -> dict[str, str]:
    # Only what git needs: the web server's own environment holds its secrets.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_PROJECT_ROOT": mirror_root,
        "GIT_HTTP_EXPORT_ALL": "1",
        "PATH_INFO": path_info,
        "REQUEST_METHOD": request.method or "GET",
        "QUERY_STRING": request.META.get("QUERY_STRING", ""),
        "CONTENT_TYPE": request.META.get("CONTENT_TYPE", ""),
        "REMOTE_ADDR": request.META.get("REMOTE_ADDR", ""),
        # Protocol v2 wants may name any commit (an applied series is on no
        # branch); v0 clients get the same through this setting.
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "uploadpack.allowAnySHA1InWant",
        "GIT_CONFIG_VALUE_0": "true",
        "GIT_CONFIG_KEY_1": "http.receivepack",
        "GIT_CONFIG_VALUE_1": "false",
    }
    if request.headers.get("Git-Protocol"):
        env["GIT_PROTOCOL"] = request.headers["Git-Protocol"]
    if request.headers.get("Content-Encoding"):
        env["HTTP_CONTENT_ENCODING"] = request.headers["Content-Encoding"]
    return env


# A build machine authenticates with its token, never a session: nothing to forge.
@csrf_exempt
def serve(request: HttpRequest, tree_id: int, rest: str) -> HttpResponseBase:
    auth = request.headers.get("Authorization", "")
    token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
    machine = machines.machine_for_token(token) if token else None
    if machine is None:
        return _plain(401, "kperf: a build machine's token is needed (KPERF_BUILDER_TOKEN): kperf-manage add_builder")
    if rest not in _SERVICES or (rest == "info/refs" and request.GET.get("service") != "git-upload-pack"):
        return _plain(404, "kperf: build machines may only fetch (git-upload-pack)")
    tree = Tree.objects.filter(pk=tree_id).first()
    if tree is None or not machines.may_fetch(machine, tree_id):
        return _plain(403, f"kperf: build machine {machine.name} holds no build of tree {tree_id}")
    mirror = tree.mirror_path
    if not (mirror / "HEAD").exists():
        return _plain(404, f"kperf: the service has no mirror of tree {tree_id} yet; the build is tried again")
    env = _environment(request, str(mirror.parent), f"/{mirror.name}/{rest}")
    body = request.body if request.method == "POST" else b""
    env["CONTENT_LENGTH"] = str(len(body))
    proc = subprocess.Popen(
        ["git", "http-backend"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    def feed() -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(body)
        except BrokenPipeError:
            pass
        finally:
            proc.stdin.close()

    threading.Thread(target=feed, daemon=True).start()
    status, headers = 200, {}
    while True:
        line = proc.stdout.readline().rstrip(b"\r\n")
        if not line:
            break
        key, _, value = line.decode("latin-1").partition(":")
        if key.lower() == "status":
            status = int(value.strip().split()[0])
        else:
            headers[key.strip()] = value.strip()

    def stream() -> Iterator[bytes]:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            yield from iter(lambda: proc.stdout.read(1 << 16), b"")  # type: ignore[union-attr]
        finally:
            proc.stdout.close()
            errors = proc.stderr.read().decode(errors="replace").strip()
            proc.stderr.close()
            if proc.wait() != 0 or errors:
                log.warning("git http-backend, tree %s, %s: exit %s %s", tree_id, machine.name, proc.returncode, errors)

    response = StreamingHttpResponse(stream(), status=status, content_type=headers.pop("Content-Type", None))
    for key, value in headers.items():
        response[key] = value
    return response
