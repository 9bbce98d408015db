"""Ollama's API (docs/protocol.md section 4): requests.py (request bodies and options),
responses.py (NDJSON lines, whole answers, model listings), names.py (Ollama's `name:tag`
to a served model), errors.py (the `{"error": ...}` shape and Ollama's statuses)."""
