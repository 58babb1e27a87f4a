"""Reporting: results as rows (``rows``), rendered as text, JSON, an HTML page (``html``)
and a Chrome/Perfetto trace (``export``). Reports read results; they never compute them."""
