"""The /ws door: endpoint.py (handshake, caps, mode), connection.py (tokenpipe.v1),
plain.py (the article's plain-text mode), frame_sink.py (frames out and reading held or
stopped: directly through server/uvicorn/flow.py where tokenpipe's protocol runs, else
through the ASGI send), budget.py (frames in per second)."""
