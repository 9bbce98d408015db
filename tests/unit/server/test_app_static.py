"""The web UI mount: an unbuilt UI explains itself, unknown paths are 404 for every method."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tokenpipe.config import Settings
from tokenpipe.server import app as app_module


@pytest.mark.parametrize("built", [True, False])
async def test_the_ui_mount_answers_404_for_unknown_paths_and_never_500(
    built: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    static = tmp_path / "static"
    if built:
        static.mkdir()
        (static / "index.html").write_text("<title>tokenpipe</title>")
    monkeypatch.setattr(app_module, "STATIC", static)
    app = app_module.create_app(Settings(engine="fake"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as http:
        page = await http.get("/")
        assert page.status_code == 200 and "tokenpipe" in page.text
        for method in ("POST", "PUT", "DELETE"):
            r = await http.request(method, "/v2/chat", json={})  # /api/ is Ollama's door
            assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
        assert (await http.get("/nope.js")).status_code == 404
        assert (await http.post("/", json={})).status_code == 405  # it exists: wrong method
