"""Moves one sequence's cells from the split KV cache to the shared one (tiers.py), so that a
conversation that outgrows its split stream goes on in the shared pool without decoding its
earlier turns again: 300 cells of the bundled model move in 19 ms, where decoding them
takes 2 s on this 2-core machine (1,000: 75 ms against 8 s; docs/benchmarks.md).

llama.cpp saves and restores a sequence's cells (llama_state_seq_get_data, _set_data), but
only between caches with as many streams: the split cache writes a section for each of its
streams, the unified cache has one. The saved form (llama-context.cpp state_seq_get_data,
llama-kv-cache.cpp state_write) is the magic, the sequence id, the stream count, then for
each stream its cell count and, where that is not zero, its cells. In the split cache
sequence i's cells are all in stream i, so the shared cache's form of them is the same
magic and id, a count of one, and that one section. Anything else (another layout, a
restore that fails) moves nothing and the caller decodes the prefix instead.
"""

from __future__ import annotations

import ctypes
import logging
import struct
from typing import Any

import llama_cpp as lc

log = logging.getLogger("tokenpipe.llamacpp")

_HEAD = struct.Struct("<Ii")  # the magic, the sequence id
_U32 = struct.Struct("<I")


def one_stream(saved: bytes, streams: int) -> bytes | None:
    """The saved cells of a split cache's sequence as a one-stream cache saves them, or None
    when `saved` does not have the layout described above."""
    if len(saved) < _HEAD.size + _U32.size * (streams + 1):
        return None
    head = saved[:_HEAD.size]
    _, seq_id = _HEAD.unpack_from(saved)
    pos = _HEAD.size
    (count,) = _U32.unpack_from(saved, pos)
    if count != streams:
        return None
    pos += _U32.size
    empty = bytes(_U32.size)
    before = 0  # the empty streams before the sequence's own: a zero count each
    while before < streams and saved[pos:pos + _U32.size] == empty:
        pos, before = pos + _U32.size, before + 1
    end = len(saved) - _U32.size * (streams - 1 - before)  # and those after it
    # a split cache keeps sequence i in stream i: cells elsewhere are another layout
    if before != seq_id or end <= pos or saved[end:] != bytes(len(saved) - end):
        return None
    return head + _U32.pack(1) + saved[pos:end]


def move(src_ctx: Any, src_seq: int, streams: int, dst_ctx: Any, dst_seq: int) -> int:
    """Copies the cells of src_seq (in a split cache of `streams` streams) into dst_seq of a
    unified cache, where dst_seq must hold none. Returns the bytes restored, 0 if nothing
    moved (dst_seq then still holds none)."""
    size = lc.llama_state_seq_get_size(src_ctx, src_seq)
    if size <= 0:
        return 0
    buffer = (ctypes.c_uint8 * size)()
    written = lc.llama_state_seq_get_data(src_ctx, buffer, size, src_seq)
    form = one_stream(ctypes.string_at(buffer, written), streams) if written else None
    if form is None:
        log.info("a split stream's saved cells have an unknown layout: decoding instead")
        return 0
    restored = lc.llama_state_seq_set_data(dst_ctx, (ctypes.c_uint8 * len(form))
                                           .from_buffer_copy(form), len(form), dst_seq)
    return int(restored)
