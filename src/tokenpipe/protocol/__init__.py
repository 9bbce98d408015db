"""Wire models: ws.py for tokenpipe.v1, openai.py for the OpenAI-compatible HTTP API."""
