"""How much of a waiting prompt a step takes beside streaming answers (engines/llamacpp/
pace.py): sized by time from the steps the decode thread measured, never so small that the
steps' fixed parts cost more than the prompt's rows. Its effect on a real server:
scripts/measure_prompt_pace.py; the answers it cannot change: the engine tests."""

from __future__ import annotations

from tokenpipe.engines.llamacpp.pace import CHUNK_MAX, CHUNK_MIN, PromptPace


def learned(step_ms: float, fixed_ms: float, row_ms: float) -> PromptPace:
    """A pace that has measured steps of one row and of 40 rows on such a machine."""
    pace = PromptPace(step_ms / 1000)
    for _ in range(60):
        pace.record(1, (fixed_ms + row_ms) / 1000)
        pace.record(40, (fixed_ms + 40 * row_ms) / 1000)
    return pace


def test_nobody_decoding_or_no_limit_takes_whole_chunks() -> None:
    assert learned(50, 15, 3).chunk(0) == CHUNK_MAX
    assert learned(0, 15, 3).chunk(4) == CHUNK_MAX


def test_the_chunk_keeps_the_step_near_its_target() -> None:
    pace = learned(50, 10, 2)
    # a step of one row reads as the fixed part (12 ms), one of 40 as that and 40 rows
    assert abs(pace.fixed_s - 0.012) < 0.001 and abs(pace.row_s - 0.00195) < 0.0001
    chunk = pace.chunk(2)
    assert 24 <= chunk <= 25  # 4 x 12 / 1.95: the floor, over (50 - 12) / 1.95 - 2 = 17
    slower = learned(200, 10, 2).chunk(2)
    assert 93 <= slower <= 95  # (200 - 12) / 1.95 - 2: a longer step, a larger chunk


def test_each_tier_in_the_step_pays_its_fixed_part() -> None:
    pace = learned(200, 10, 2)
    assert pace.chunk(2, decodes=2) < pace.chunk(2, decodes=1)


def test_a_slow_machine_still_moves_prompts_at_four_fifths_of_their_speed() -> None:
    pace = learned(50, 60, 6)  # the fixed part alone is longer than the target
    chunk = pace.chunk(1)
    rows_s, fixed_s = chunk * pace.row_s, pace.fixed_s
    assert rows_s / (rows_s + fixed_s) >= 0.79 and chunk >= CHUNK_MIN
