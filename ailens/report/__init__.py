"""Reporting: results as rows (``rows``: the data; ``sections``: the builders), rendered as
text and JSON (``text``), an HTML page (``html``) and a Chrome/Perfetto trace (``export``).
Reports read results; they never compute them."""
