"""Rendering of report blocks as Markdown (images linked) and self-contained HTML
(images embedded as base64)."""

from __future__ import annotations

import base64
import html

Block = tuple  # ("h", level, text) | ("p", text) | ("ul", items) | ("table", header, rows)
#              | ("img", title, png_bytes) | ("marked", [(text, is_marked), ...])


def render_markdown(blocks: list[Block], images: dict[int, str]) -> str:
    out = []
    for b in blocks:
        if b[0] == "h":
            out.append("#" * b[1] + " " + b[2])
        elif b[0] == "p":
            out.append(b[1])
        elif b[0] == "ul":
            out.append("\n".join(f"- {i}" for i in b[1]))
        elif b[0] == "table":
            header, rows = b[1], b[2]
            out.append(
                "\n".join(
                    [
                        "| " + " | ".join(header) + " |",
                        "|" + "---|" * len(header),
                        *("| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows),
                    ]
                )
            )
        elif b[0] == "img":
            out.append(f"![{b[1]}]({images[id(b)]})")
        elif b[0] == "marked":
            out.append("".join(_md_marked(t, m) for t, m in b[1]))
    return "\n\n".join(out) + "\n"


def _md_marked(text: str, marked: bool) -> str:
    """Inline text, ``**bold**`` when marked (whitespace kept outside the markers)."""
    text = text.replace("\n", " ").replace("*", "\\*").replace("_", "\\_")
    core = text.strip()
    if not marked or not core:
        return text
    lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
    return f"{lead}**{core}**{trail}"


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|")


CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;"
    "color:#222}table{border-collapse:collapse;margin:1em 0;font-size:13px;display:block;"
    "overflow-x:auto;max-width:100%}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f2f2f2}"
    "img{max-width:100%;border:1px solid #eee}figure{margin:1.5em 0}"
    "figcaption{font-size:13px;color:#555}"
)


def render_html(blocks: list[Block], title: str) -> str:
    body = []
    for b in blocks:
        if b[0] == "h":
            body.append(f"<h{b[1]}>{html.escape(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            body.append(f"<p>{html.escape(b[1])}</p>")
        elif b[0] == "ul":
            body.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in b[1]) + "</ul>")
        elif b[0] == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b[1])
            rows = "".join(
                "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
                for r in b[2]
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif b[0] == "img":
            data = base64.b64encode(b[2]).decode("ascii")
            body.append(
                f'<figure><img alt="{html.escape(b[1])}" '
                f'src="data:image/png;base64,{data}"><figcaption>'
                f"{html.escape(b[1])}</figcaption></figure>"
            )
        elif b[0] == "marked":
            body.append(
                "<p>"
                + "".join(
                    f"<mark>{html.escape(t)}</mark>" if m else html.escape(t) for t, m in b[1]
                )
                + "</p>"
            )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>'
        f"{html.escape(title)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
