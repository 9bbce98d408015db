"""The /ws door: endpoint.py (handshake, caps, mode), connection.py (tokenpipe.v1),
plain.py (the article's plain-text mode), frame_sink.py (frames out, with the direct-write
fast path), budget.py (frames in per second), uvicorn_protocol.py (the hardened
websockets-sansio protocol uvicorn runs)."""
