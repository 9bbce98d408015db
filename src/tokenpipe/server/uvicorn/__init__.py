"""Everything that reaches into uvicorn's private internals (pinned: uvicorn>=0.54,<0.55),
in one folder: http.py (the guarded httptools protocol: limits, deadlines, caps, Host),
websocket.py (the hardened websockets-sansio protocol) and flow.py (`Flow`, the one object
a /ws connection receives to write frames directly and to hold or stop reading). No other
module names uvicorn's protocol attributes."""
