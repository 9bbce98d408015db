"""Anthropic's Messages API wire shapes: requests.py (request bodies), events.py (the answer,
whole or as named SSE events), errors.py (the error shape and every status), responses.py
(the answer's models, for /docs)."""
