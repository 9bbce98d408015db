"""What every door's request reading shares, in no door's words: the JSON body (`read_json`,
whose `BadBody` each door words itself), the validator that refuses a lone surrogate, and
the validator that lets only a field's neutral values through. Each door names the
pydantic error kind it raises, so its own error mapping words the refusal. pydantic is
imported only where used: the door table reads the doors' error modules, which import
this one, and the bench must start without pydantic."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
LONE_SURROGATE = "text with a lone UTF-16 surrogate (\\ud800-\\udfff) is not valid Unicode"


@dataclass
class BadBody(Exception):
    """Why a request body is not JSON this server takes. `kind`: empty, syntax (json's
    `detail` at `line`, `column`), constant (NaN or Infinity, named in `detail`, refused when
    strict), deep (nested too deeply) or value (`detail`: an integer over Python's digit
    limit, bytes that are not UTF-8)."""

    kind: str
    detail: str = ""
    line: int = 0
    column: int = 0


def read_json(raw: bytes, *, strict: bool = False) -> Any:
    """The body as JSON whatever its content type says; BadBody when it is not. `strict`
    (RFC 8259 to the letter): a blank body is empty, NaN and Infinity are refused."""
    if not (raw.strip() if strict else raw):
        raise BadBody("empty")
    try:
        return json.loads(raw, parse_constant=_no_constant if strict else None)
    except json.JSONDecodeError as exc:
        raise BadBody("syntax", exc.msg, exc.lineno, exc.colno) from None
    except _Constant as exc:
        raise BadBody("constant", str(exc)) from None
    except RecursionError:
        raise BadBody("deep") from None
    except ValueError as exc:  # an integer over Python's digit limit, bytes not UTF-8
        raise BadBody("value", str(exc)) from None


class _Constant(Exception):
    """NaN or Infinity, which Python's json reads and JSON (RFC 8259) does not allow."""


def _no_constant(name: str) -> Any:
    raise _Constant(name)


def check_text(value: T, kind: str = "invalid_value", at: str | None = None) -> T:
    """A lone surrogate (the JSON escape "\\ud800") is not text: it cannot be tokenized.
    Raises pydantic's error of `kind` (`at`: where below the field, for its message)."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            from pydantic_core import PydanticCustomError

            raise PydanticCustomError(kind, LONE_SURROGATE, {"at": at} if at else None
                                      ) from None
    return value


def neutral_only(neutral: tuple[Any, ...], message: str,
                 kind: str = "unsupported_parameter") -> Any:
    """A validator that lets None and the neutral values through (as None) and refuses the
    rest with pydantic's error of `kind`, worded `message`."""
    from pydantic import BeforeValidator
    from pydantic_core import PydanticCustomError

    def check(value: Any) -> Any:
        if value is None or any(value == n and type(value) is type(n) for n in neutral):
            return None
        raise PydanticCustomError(kind, message)

    return BeforeValidator(check)
