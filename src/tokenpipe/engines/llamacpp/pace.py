"""How much of a waiting prompt a step may take while other answers stream.

A step's rows are computed together: a prompt chunk of n tokens beside decoding sequences
delays each of their next tokens by the chunk's time. On 2 cores the bundled model computes
about 320 prompt tokens a second, so a fixed chunk of 512 tokens held every stream for about
1.5 s, and three 33-token chat prompts arriving together held one for 300 ms (issue 31's
bystander). The chunk is therefore sized by time: the prompt rows that keep a step within
`step_s`, from the cost per row the decode thread measures on its own steps (it moves with
the model, the threads, the machine's load and the context's length). A prompt with nobody
decoding beside it takes whole chunks (CHUNK_MAX): there is no stream to keep waiting.

The answers do not change: under --determinism exact a row's numbers do not depend on what
shares its step (exact.py), so how a prompt is cut is free.
"""

from __future__ import annotations

CHUNK_MAX = 512  # prompt tokens a step, at most (and with nobody decoding beside it)
CHUNK_MIN = 8  # a prompt always moves on, however slow a row is
FIRST_STEP_S = 0.015  # assumed cost of a step's fixed part until one has been measured
FIRST_ROW_S = 0.003  # and of each row in it
WEIGHT = 0.25  # of a new measurement in each running estimate
FLOOR = 4  # a chunk's rows cost at least this many times the step's fixed part


class PromptPace:
    """The prompt rows a step may add beside decoding sequences (see the module). A step of
    n rows is read as fixed + n x row: `fixed` from steps of one or two rows (what a step
    costs whatever it holds: the weights read, the graph), `row` from steps of four or
    more, what they took beyond `fixed` per row. Both follow the machine as it is now."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s  # 0: no limit but CHUNK_MAX
        self.fixed_s = FIRST_STEP_S
        self.row_s = FIRST_ROW_S

    def record(self, rows: int, seconds: float) -> None:
        """A step of `rows` rows took `seconds`."""
        if rows <= 2:
            self.fixed_s += WEIGHT * (seconds - self.fixed_s)
        elif rows >= 4:
            per_row = max(seconds - self.fixed_s, 0.0) / rows
            self.row_s += WEIGHT * (per_row - self.row_s)

    def chunk(self, decoding: int, decodes: int = 1) -> int:
        """Prompt tokens the next step may take beside `decoding` rows of answers, the
        step being `decodes` llama_decode calls (one a KV tier in use: each pays the fixed
        part)."""
        if decoding == 0 or self.step_s <= 0:
            return CHUNK_MAX
        fits = int((self.step_s - decodes * self.fixed_s) / self.row_s) - decoding
        # the prompt's rows cost at least FLOOR times the step's fixed part: however slow
        # the machine (a loaded one reads a larger fixed part), a prompt beside streams is
        # computed at 80% of its speed alone or better, so that a burst of long prompts
        # (eight requests with tools at once) costs at most a quarter more CPU than it
        # would in chunks of 512 (the test suite's CPU grew by a tenth with no floor)
        floor = int(FLOOR * decodes * self.fixed_s / self.row_s)
        return max(CHUNK_MIN, min(CHUNK_MAX, max(fits, floor)))
