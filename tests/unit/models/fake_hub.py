"""A stand-in for the Hugging Face hub on a loopback port (this machine has no network to
the real one): the two routes hf_hub_download and list_repo_files use, Range requests
honoured (resumed downloads), a connection dropped mid-file on request, every request
recorded."""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Hub:
    files: dict[str, bytes]  # "org/repo/path.gguf" -> bytes
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, Range
    url: str = ""
    drop_after: int | None = None  # the first GET of a file stops after this many bytes

    def etag(self, data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()


@contextmanager
def fake_hub(files: dict[str, bytes], drop_after: int | None = None) -> Iterator[Hub]:
    hub = Hub(files, drop_after=drop_after)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, send_body: bool) -> None:
            hub.requests.append((self.command, self.path, self.headers.get("Range")))
            path = self.path.split("?")[0]
            if path.startswith("/api/models/") and "/tree/" in path:
                repo = path.removeprefix("/api/models/").split("/tree/")[0]
                tree = [{"type": "file", "oid": "0" * 40, "size": len(data),
                         "path": name.removeprefix(repo + "/")}
                        for name, data in hub.files.items() if name.startswith(repo + "/")]
                if not tree:
                    return self._status(404, {"X-Error-Code": "RepoNotFound"})
                return self._send(json.dumps(tree).encode(), "application/json", send_body)
            if "/resolve/main/" in path:
                name = path.lstrip("/").replace("/resolve/main/", "/", 1)
                data = hub.files.get(name)
                if data is None:
                    return self._status(404, {"X-Error-Code": "EntryNotFound"})
                start = 0
                ranged = self.headers.get("Range")
                if ranged and ranged.startswith("bytes="):
                    start = int(ranged.removeprefix("bytes=").split("-")[0])
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", "c" * 40)
                self.send_header("ETag", f'"{hub.etag(data)}"')
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if send_body and hub.drop_after is not None:
                    self.wfile.write(data[start:start + hub.drop_after])
                    self.wfile.flush()
                    hub.drop_after = None
                    self.connection.shutdown(socket.SHUT_RDWR)  # mid-file, as a dropped link
                    self.close_connection = True
                elif send_body:
                    self.wfile.write(data[start:])
                return None
            return self._status(404, {})

        def _status(self, code: int, headers: dict[str, str]) -> None:
            self.send_response(code)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _send(self, body: bytes, kind: str, send_body: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self._answer(False)

        def do_GET(self) -> None:
            self._answer(True)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
