"""What the store's results say, as data: no rendering (that is ``farm.report``'s).

    sql        the per-job report queries and the run facts they share
    summarize  a job's summary (``farm.summary``) made from its runs (the one function)
    finish     a finished job's row values: its summary, how it ended, speculation or none
    rows       the per-job report rows (plain Python) and their frame
    printed    whole reports as printed, kept for the next report of the same jobs
    runs       runs as the tidy frame: a campaign's, one job's, its streams
    export     ``farm export``'s runs, typed by the store's schema
    groups     jobs combined per group and per prompt category
    compare    two campaigns or builds, job by comparable job
    history    a job's series over the builds it ran on, and the changes between them
    curve      the engine cost curve of synthetic-acceptance jobs
    recommend  predicted speedups, picks and their verification
    peers      other tools' imported figures, matched to the farm's jobs

Nothing is imported here: ``farm report --format json`` reads ``rows`` without pandas.
"""
