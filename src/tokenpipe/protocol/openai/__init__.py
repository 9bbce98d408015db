"""The OpenAI-compatible API's wire shapes: requests.py (request bodies), responses.py
(answers), render.py (the objects of one answer, whole or as SSE chunks), errors.py (the
error shape), schema.py (the event stream's OpenAPI description)."""
