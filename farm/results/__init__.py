"""What the store's results say, as data: no rendering (that is ``farm.report``'s).

    sql        the per-job report queries and the run facts they share
    summary    the typed, versioned job summary, and the upgrades of older ones
    summarize  a job's summary made from its runs (the one function that does)
    finish     a finished job's row values: its summary, how it ended, speculation or none
    rows       the per-job report rows (plain Python) and their frame
    runs       runs as the tidy frame: a campaign's, one job's, its streams
    groups     jobs combined per group and per prompt category
    compare    two campaigns or builds, job by comparable job
    history    a job's series over the builds it ran on, and the changes between them
    curve      the engine cost curve of synthetic-acceptance jobs
    recommend  predicted speedups, picks and their verification

Nothing is imported here: ``farm report --format json`` reads ``rows`` without pandas.
"""
