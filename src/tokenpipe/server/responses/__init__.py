"""The OpenAI Responses door: routes.py (create, get, delete, cancel, input_items),
session_response.py (a session as a response or its events), runs.py (background
responses), store.py (the SQLite store)."""
