"""Presentation: report sections, text/Markdown/JSON rendering, progress lines."""
