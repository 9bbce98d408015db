"""What a session keeps of an answer's text until a reader takes it, as pieces: content
strings, and Parts (another channel, or content with logprobs or token ids). `merged`
joins the pieces that piled up for a reader that fell behind into as few as keep their
meaning; `delta_of` makes one a Delta."""

from __future__ import annotations

from .types import Delta, Part


def delta_of(seq: int, piece: str | Part) -> Delta:
    if isinstance(piece, str):
        return Delta(seq, piece)
    return Delta(seq, piece.text, piece.channel, piece.index, piece.call_id, piece.name,
                 piece.logprobs, piece.token_ids)


def merged(pieces: list[str | Part]) -> list[str | Part]:
    """Runs of the same channel (and call) joined: a call's first part takes the argument
    text after it along; the next call starts a part of its own. Content with logprobs
    (a content Part) joins plain content text, its logprobs kept in order."""
    out: list[str | Part] = []
    for piece in pieces:
        last = out[-1] if out else None
        if isinstance(piece, str):
            if isinstance(last, str):
                out[-1] = last + piece
            elif isinstance(last, Part) and last.channel == "content":
                out[-1] = Part(last.text + piece, "content", logprobs=last.logprobs,
                               token_ids=last.token_ids)
            else:
                out.append(piece)
        elif isinstance(last, str) and piece.channel == "content":
            out[-1] = Part(last + piece.text, "content", logprobs=piece.logprobs,
                           token_ids=piece.token_ids)
        elif (isinstance(last, Part) and piece.call_id is None and last.channel == piece.channel
              and last.index == piece.index):
            out[-1] = Part(last.text + piece.text, last.channel, last.index, last.call_id,
                           last.name, last.logprobs + piece.logprobs,
                           last.token_ids + piece.token_ids)
        else:
            out.append(piece)
    return out
