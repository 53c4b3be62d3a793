"""One proposed change to a site profile, as the refresh report prints it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Change:
    section: str  # partitions, node_types, qos, modules, stacks
    name: str
    kind: str  # added, changed, removed, notice
    field: str = ""
    old: Any = None
    new: Any = None
    line: int = 0
    note: str = ""

    def __str__(self) -> str:
        where = f" (profile line {self.line})" if self.line else ""
        if self.kind == "changed":
            text = (
                f"~ {self.section}.{self.name}.{self.field}: {_show(self.old)} -> {_show(self.new)}"
            )
        elif self.kind == "added":
            text = f"+ {self.section}.{self.name}" + (f": {self.new}" if self.new else "")
        elif self.kind == "removed":
            text = f"- {self.section}.{self.name}"
        else:
            text = f"! {self.section}.{self.name}"
        return text + where + (f"  # {self.note}" if self.note else "")


def _show(v: Any) -> str:
    return "(none)" if v is None else str(v)
