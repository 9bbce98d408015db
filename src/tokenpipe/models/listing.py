"""`tokenpipe models`: each model file found, with its size and header fields."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from .catalog import Places
from .entry import ModelEntry
from .header import Header, read_header


@dataclass(frozen=True, slots=True)
class Row:
    entry: ModelEntry
    size: int
    header: Header

    def as_json(self) -> dict[str, Any]:
        return {"name": self.entry.qualified, "store": self.entry.store,
                "path": str(self.entry.path), "size_bytes": self.size,
                "quantization": self.header.quantization,
                "context_length": self.header.context_length,
                "architecture": self.header.architecture}


def rows(places: Places) -> tuple[list[Row], list[str]]:
    found = places.scan()
    out, warnings = [], list(found.warnings)
    for entry in found.entries:
        try:
            size = entry.path.stat().st_size
            header = read_header(entry.path)
        except (OSError, ValueError) as exc:
            warnings.append(f"{entry.qualified}: {exc}")
            continue
        out.append(Row(entry, size, header))
    return out, warnings


def human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def write(places: Places, *, as_json: bool, out: TextIO = sys.stdout,
          err: TextIO = sys.stderr) -> int:
    found, warnings = rows(places)
    for warning in warnings:
        print(f"warning: {warning}", file=err)
    if as_json:
        json.dump({"models": [r.as_json() for r in found], "warnings": warnings}, out, indent=2)
        out.write("\n")
        return 0
    table = [("NAME", "SIZE", "QUANT", "CONTEXT", "PATH")]
    table += [(r.entry.qualified, human(r.size), r.header.quantization or "?",
               str(r.header.context_length or "?"), str(r.entry.path)) for r in found]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for row in table:
        cells = [cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)]
        print("  ".join([*cells, row[4]]), file=out)
    if not found:
        print("no models found (see docs/models.md for where tokenpipe looks)", file=out)
    return 0
