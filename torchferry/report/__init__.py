"""Renderers of the one `ferry check` result model: terminal (text), JSON, self-contained HTML."""
