"""The Anthropic Messages door: routes.py (parse, start, count) and session_response.py
(one session as Anthropic's message or event stream)."""
