"""Rendering: frames and rows (``farm.results``) as terminal tables, CSV, JSON, HTML and
PNG plots. Renderers take data and return text or bytes; they query nothing and compute
no statistics, and only the CLI imports them.

- ``cells``: how one value reads in a table cell, the same in every output.
- ``text``: terminal tables (fitted to the terminal's width), CSV and JSON.
- ``html`` and ``plots``: the self-contained HTML page and its PNG plots; ``html_tables``:
  the page's tables.
- ``history``: ``farm history`` as tables, markdown, JSON and a page with trend plots.

Nothing is imported here: a command that prints JSON loads neither rich nor matplotlib.
"""
