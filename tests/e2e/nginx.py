"""nginx in the tests, configured as docs/deployment.md's guide writes it: the guide's
block (the one marked `nginx-config`) with its example replicas replaced by real ones on
loopback and its port by a free one; the same wait_ready/stop as ServerProcess."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx

from tests.conftest import LOGS, ROOT, free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
GUIDE = ROOT / "docs" / "deployment.md"


def guide_config() -> str:
    """The nginx block the guide marks as tested."""
    text = GUIDE.read_text()
    after = text[text.index("<!-- nginx-config"):]
    found = re.search(r"```nginx\n(.*?)```", after, re.DOTALL)
    assert found, "docs/deployment.md lost its nginx block"
    return found.group(1)


class Nginx:
    def __init__(self, replica_ports: list[int]) -> None:
        assert Path(NGINX).is_file(), (
            "nginx is not installed: scripts/setup.sh --test installs nginx-light")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/ws"
        ports = iter(replica_ports)
        block = re.sub(r"server 10\.0\.1\.\d+:8000",
                       lambda _: f"server 127.0.0.1:{next(ports)}", guide_config())
        block = block.replace("listen 80;", f"listen 127.0.0.1:{self.port};")
        self.dir = LOGS / f"nginx-{self.port}"
        self.dir.mkdir(parents=True, exist_ok=True)
        temps = "\n".join(f"  {kind}_temp_path {self.dir}/{kind};"
                          for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = self.dir / "nginx.conf"
        conf.write_text(
            ("user root;\n" if os.geteuid() == 0 else "")
            + f"daemon off;\nworker_processes 1;\npid {self.dir}/nginx.pid;\n"
            f"error_log {self.dir}/error.log info;\nevents {{ worker_connections 256; }}\n"
            f"http {{\n  access_log {self.dir}/access.log;\n{temps}\n{block}\n}}\n")
        self.proc = subprocess.Popen([NGINX, "-p", str(self.dir), "-c", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, (self.dir / "error.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            assert time.monotonic() < deadline, "nginx did not come up"
            time.sleep(0.1)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        return self.proc.returncode
