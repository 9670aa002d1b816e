"""The report: blocks rendered as Markdown and self-contained HTML, the figures (matplotlib's
object API), the examples section, the length section, and ``posgen compare``."""
