"""What a report says, apart from how it is drawn: sections of paragraphs, tables and
figures. One template draws a ``Report`` as HTML and the PDF is laid out from that HTML, so
both files always carry the same content."""

from __future__ import annotations

from dataclasses import dataclass, field

from matplotlib.figure import Figure as MplFigure


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]
    left_columns: int = 2  # how many leading columns hold names (left-aligned)
    note: str = ""  # a caption under the table


@dataclass(frozen=True)
class Figure:
    figure: MplFigure
    alt: str


@dataclass(frozen=True)
class Preformatted:
    """Verbatim text in a fixed-width font (the suite's configuration)."""

    text: str


CALLOUT_KINDS = ("ok", "warn", "info")


@dataclass(frozen=True)
class Callout:
    """A highlighted verdict: ``kind`` is its severity, ``ok``, ``warn`` or ``info`` (a
    coloured box in HTML and PDF)."""

    text: str
    kind: str = "info"

    def __post_init__(self) -> None:
        if self.kind not in CALLOUT_KINDS:
            raise ValueError(f"callout kind {self.kind!r}: expected one of {CALLOUT_KINDS}")


Block = Paragraph | Table | Figure | Preformatted | Callout


@dataclass
class Section:
    """``folded``: reference material (every cell's rows, the suite file), folded away in
    HTML and printed in full in the PDF."""

    title: str
    blocks: list[Block] = field(default_factory=list)
    level: int = 2
    folded: bool = False


@dataclass
class Report:
    title: str
    sections: list[Section]

    def figures(self) -> list[MplFigure]:
        return [b.figure for s in self.sections for b in s.blocks if isinstance(b, Figure)]
