"""Statistics: pure functions on the tidy runs frame (one row per run, ``frame.tidy_runs``)
and on numbers. No database, network, broker, files or settings; no module here imports
another package of the farm but ``farm.words`` (a phrase the reports read back).

    distributions  Student's t and F without scipy (no numpy)
    intervals      Interval, the t margin and log intervals, best-of-m (no numpy)
    design         the design of a job and the stop decision (no numpy, no pydantic)
    frame          the runs frame: its columns, valid runs, one job at a time
    speedup        pair values, paired t, the crossover model, a job's estimate
    twostage       the two-stage rule: pairs planned from the first stage, run on to target
    sequential     a look after each pair: the decision and the precision designs
    race           many settings raced against one baseline: the fastest within epsilon
    pooling        jobs combined: random-effects over log speedups, variance shrinkage
    acceptance     accepted over drafted with prompts as clusters, per position
    agreement      variant outputs against the baseline's, against the baseline's repeats
    drift          the machine's trend over a job's blocks (autocorrelated blocks allowed)
    warmup         a block's first run against its later ones: was the warm-up enough
    clock          the server's decode speeds against the client's clock: the witness
    difference     a change between two measurements, false discovery rate across many
    history        a job's series on one build (blocks as units), each with its interval
    changes        a history's changes between builds, in words, and the regression gate
    online         between-build variance; LORD++ calls made as builds arrive
    traffic        latency percentiles, simultaneous streams and slots
    prompt_speed   the prompts' length and each arm's prompt processing speed
    curve          the engine cost curve over acceptance lengths
    prediction     a drafter's speedup from its acceptance and the cost curve
    bisect         a bisect's decisions, their error rates, the spread between jobs
    busy           blocks run beside other work
    board          many machines' jobs: machines as random effects, the best setting per GPU

Nothing is imported here: ``from farm.stats.design import Design`` loads no numpy.
"""
