"""A Hugging Face hub on 127.0.0.1 for the tests: the real client code talks to it over HTTP.

It serves model and dataset repositories in the hub's URL and header layout, as far as
huggingface_hub's downloads and API calls use it:

- `GET /api/{models,datasets}/{repo}/revision/{rev}`: repository info (`sha`, `siblings`);
- `GET /api/{type}s/{repo}/tree/{rev}[/{path}]`: the recursive file listing (`oid`, `size`,
  `lfs: {oid: sha256, size, pointerSize}` for large files);
- `POST /api/{type}s/{repo}/paths-info/{rev}`: the same entries for the posted `paths`;
- `HEAD`/`GET /[datasets/]{repo}/resolve/{rev}/{file}`: the file, with `X-Repo-Commit`, `ETag`
  (the sha256 of large files, the git blob sha1 of small ones), `Content-Length`, byte ranges;
- errors as the hub sends them: 404 with `X-Error-Code` `RepoNotFound`, `RevisionNotFound` or
  `EntryNotFound`;
- and, beside the hub, GitHub's raw file server for reference annotation files:
  `GET /github-raw/{owner}/{repo}/{commit}/{path}` (`publish_github`), 404 for anything else
  (what `VLBENCH_GITHUB_RAW_ENDPOINT` points at in `client_environment`).

Branches move with `commit()`; faults are injected per path: `fail(path, status)` answers the
next request with an error, `truncate(path)` closes the next download half-way, `corrupt(path)`
serves bytes that differ from the published sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

import pytest

LFS_SUFFIXES = (".parquet", ".zip", ".tar", ".bin", ".safetensors", ".pt", ".jpg", ".png")
API = re.compile(r"^/api/(models|datasets)/([^/]+/[^/]+)/(revision|tree|paths-info)/([^/]+)(/.*)?$")
RESOLVE = re.compile(r"^/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
GITHUB_RAW_PREFIX = "/github-raw"
GITHUB_RAW = re.compile(r"^/github-raw/([^/]+/[^/]+)/([0-9a-f]{40})/(.+)$")


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a file's content (what the hub calls a small file's oid)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    """One hub repository: its commits (path -> bytes) and branches."""

    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)


class LoopbackHub:
    """The server's state; `endpoint` is what HF_ENDPOINT points at."""

    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[tuple[str, str, int]] = []  # method, path, status
        self.failures: dict[str, list[int]] = {}
        self.truncations: dict[str, int] = {}
        self.corrupted: set[str] = set()
        # (GitHub repository, commit, path) -> bytes of the raw file server.
        self.github: dict[tuple[str, str, str], bytes] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        # A short poll: `stop` waits for the serving loop's next poll (0.5 s by default).
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Shut the server down: its port then refuses connections."""
        self._server.shutdown()
        self._server.server_close()

    def commit(
        self,
        repo_type: str,
        repo: str,
        files: dict[str, bytes],
        branch: str = "main",
        sha: str | None = None,
    ) -> str:
        """Add a commit with exactly these files and move `branch` to it; return its sha (its
        content's digest, or `sha` to stand in for a real repository's pinned commit)."""
        digest = hashlib.sha1(repo.encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + files[path])
        entry = self.repos.setdefault((repo_type, repo), Repo())
        sha = sha or digest.hexdigest()
        entry.commits[sha] = dict(files)
        entry.branches[branch] = sha
        return sha

    def commit_folder(
        self,
        repo_type: str,
        repo: str,
        folder: Path,
        branch: str = "main",
        sha: str | None = None,
    ) -> str:
        """`commit` with every file below a folder."""
        files = {
            str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*"))
            if path.is_file()
        }
        return self.commit(repo_type, repo, files, branch, sha)

    def publish_github(self, repo: str, commit: str, path: str, data: bytes) -> None:
        """Serve a file of a GitHub repository at a commit on the raw file server route."""
        self.github[(repo, commit, path)] = data

    def fail(self, path: str, status: int = 500, times: int = 1) -> None:
        """Answer the next `times` requests whose URL path ends with `path` with `status`."""
        self.failures.setdefault(path, []).extend([status] * times)

    def truncate(self, path: str, times: int = 1) -> None:
        """Close the next `times` downloads of a file half-way (full Content-Length sent)."""
        self.truncations[path] = self.truncations.get(path, 0) + times

    def corrupt(self, path: str) -> None:
        """Serve a file with its bytes flipped: same size, a sha256 other than the published."""
        self.corrupted.add(path)

    def served(self, method: str, suffix: str) -> list[int]:
        """The status codes of the requests whose path ends with `suffix`."""
        return [
            status for m, path, status in self.requests if m == method and path.endswith(suffix)
        ]

    def _take_failure(self, path: str) -> int | None:
        with self._lock:
            for suffix, statuses in self.failures.items():
                if path.endswith(suffix) and statuses:
                    return statuses.pop(0)
        return None

    def _take_truncation(self, path: str) -> bool:
        with self._lock:
            for suffix, left in self.truncations.items():
                if path.endswith(suffix) and left:
                    self.truncations[suffix] = left - 1
                    return True
        return False


def _entry(path: str, data: bytes) -> dict:
    """A file entry of the tree and paths-info APIs."""
    item = {"type": "file", "path": path, "size": len(data), "oid": git_blob_sha1(data)}
    if path.endswith(LFS_SUFFIXES):
        sha256 = hashlib.sha256(data).hexdigest()
        item["lfs"] = {"oid": sha256, "size": len(data), "pointerSize": 134}
    return item


def _handler(hub: LoopbackHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
            hub.requests.append((self.command, urlparse(self.path).path, status))
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, payload: object, headers: dict | None = None) -> None:
            body = json.dumps(payload).encode()
            self._send(200, body, {"Content-Type": "application/json", **(headers or {})})

        def _error(self, status: int, code: str | None, message: str, commit: str = "") -> None:
            headers = {"Content-Type": "application/json", "X-Error-Message": message}
            if code:
                headers["X-Error-Code"] = code
            if commit:
                headers["X-Repo-Commit"] = commit
            self._send(status, json.dumps({"error": message}).encode(), headers)

        def _lookup(self, repo_type: str, repo: str, rev: str) -> tuple[str, dict] | None:
            entry = hub.repos.get((repo_type, repo))
            if entry is None:
                self._error(401, "RepoNotFound", "Repository not found")
                return None
            sha = entry.branches.get(rev, rev)
            if sha not in entry.commits:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return None
            return sha, entry.commits[sha]

        def _handle(self) -> None:
            url = urlparse(self.path)
            path = unquote(url.path)
            status = hub._take_failure(path)
            if status is not None:
                self._error(status, None, "injected failure")
                return
            api, resolve = API.match(path), RESOLVE.match(path)
            if path.startswith(GITHUB_RAW_PREFIX):
                raw = GITHUB_RAW.match(path)
                data = hub.github.get(raw.groups()) if raw else None
                if data is None:
                    self._send(404, b"404: Not Found", {"Content-Type": "text/plain"})
                elif path.endswith(tuple(hub.corrupted)):
                    self._send(200, bytes(byte ^ 0xFF for byte in data))
                else:
                    self._send(200, data, {"Content-Type": "text/plain; charset=utf-8"})
            elif api:
                kind, repo, action, rev, rest = api.groups()
                found = self._lookup(kind[:-1], repo, rev)
                if found is not None:
                    self._api(repo, action, found, (rest or "").lstrip("/"))
            elif resolve:
                prefix, repo, rev, filename = resolve.groups()
                found = self._lookup("dataset" if prefix else "model", repo, rev)
                if found is not None:
                    self._file(filename, *found)
            else:
                self._error(404, None, "not a hub route")

        def _api(self, repo: str, action: str, found: tuple[str, dict], rest: str) -> None:
            sha, files = found
            if action == "revision":
                siblings = [{"rfilename": name} for name in sorted(files)]
                self._json({"id": repo, "sha": sha, "siblings": siblings, "private": False})
            elif action == "tree":
                prefix = f"{rest}/" if rest else ""
                self._json([_entry(p, d) for p, d in sorted(files.items()) if p.startswith(prefix)])
            else:
                length = int(self.headers.get("Content-Length", 0))
                wanted = parse_qs(self.rfile.read(length).decode()).get("paths", [])
                self._json([_entry(p, files[p]) for p in wanted if p in files])

        def _file(self, filename: str, sha: str, files: dict) -> None:
            if filename not in files:
                self._error(404, "EntryNotFound", f"{filename} does not exist", commit=sha)
                return
            data = files[filename]
            entry = _entry(filename, data)
            etag = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
            if filename in hub.corrupted:
                data = bytes(byte ^ 0xFF for byte in data)
            headers = {"X-Repo-Commit": sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
            start = 0
            ranged = re.match(r"bytes=(\d+)-$", self.headers.get("Range", ""))
            if ranged and self.command == "GET":
                start = int(ranged.group(1))
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            body = data[start:]
            if self.command == "GET" and hub._take_truncation(filename):
                hub.requests.append((self.command, urlparse(self.path).path, 206 if start else 200))
                self.send_response(206 if start else 200)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self._send(206 if start else 200, body, headers)

        def do_GET(self) -> None:
            self._handle()

        def do_HEAD(self) -> None:
            self._handle()

        def do_POST(self) -> None:
            self._handle()

    return Handler


def client_environment(hub: LoopbackHub, hf_home: Path) -> dict[str, str]:
    """Environment variables that point a new process's huggingface_hub at the hub."""
    return {
        "HF_ENDPOINT": hub.endpoint,
        "HF_HOME": str(hf_home),
        "HF_HUB_DISABLE_XET": "1",
        "VLBENCH_GITHUB_RAW_ENDPOINT": hub.endpoint + GITHUB_RAW_PREFIX,
        "VLBENCH_REFERENCE_CACHE": str(hf_home / "vlbench-reference"),
    }


@pytest.fixture
def loopback_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackHub]:
    """A running loopback hub that this process's huggingface_hub (and subprocesses) talk to.

    huggingface_hub reads HF_ENDPOINT and its cache folder when imported, so the constants it
    read are replaced too; each test gets an empty cache.
    """
    from huggingface_hub import constants

    hub = LoopbackHub()
    hf_home = tmp_path / "hf-home"
    for key in [key for key in os.environ if key.startswith("HF_")]:
        monkeypatch.delenv(key)
    for key, value in client_environment(hub, hf_home).items():
        monkeypatch.setenv(key, value)
    template = hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    yield hub
    hub.stop()
