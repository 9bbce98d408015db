"""OpenAI's Responses API wire shapes: requests.py (request bodies), objects.py (the response
object, its output and input items), events.py (the numbered SSE events), errors.py (the
one map from tokenpipe errors to the Responses shapes)."""
