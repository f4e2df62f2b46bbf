"""Reports: the store read into pandas frames, and those frames rendered for people.

- ``sql``: the report queries and the SQL of a job's run facts (medians, median speedup).
- ``frames``: store -> DataFrames (``runs_frame`` for notebooks, ``job_report``).
- ``compare``: two campaigns or two builds, job by comparable job.
- ``cells``: how one value reads in a table cell, the same in every output.
- ``text``: terminal tables (fitted to the terminal's width), CSV and JSON.
- ``html`` and ``plots``: the self-contained HTML page and its PNG plots.
- ``show``: what ``farm report``, ``farm compare`` and ``farm export`` print or write.

Nothing is imported here: ``farm db upgrade`` reads ``sql`` without pandas or matplotlib.
"""
