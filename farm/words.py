"""Words that messages share: counted nouns (``plural(1, "job")`` is "1 job",
``plural(2, "job")`` "2 jobs"), and phrases one module writes and another reads."""

from __future__ import annotations

# How a stop reason starts when max pairs left an assured job's interval wider than its
# target (``farm.stats.twostage.stop_decision``); reports show that reason among its flags.
NOT_REACHABLE = "target not reachable"
# The interval method of a decision design's job (``farm.stats.speedup.estimate``): its
# stop reason is its answer ("faster (decided after 4 of at most 12 pairs)"), which
# reports show among its flags.
SEQUENTIAL = "sequential crossover"
# A precision design's (``farm.stats.sequential``): its stop reason says at how many pairs
# it met its target, which reports show among its flags.
ADJUSTED_SEQUENTIAL = "sequential crossover, adjusted"
# The interval methods of jobs that looked after each pair: reports show their stop reason.
LOOKING = (SEQUENTIAL, ADJUSTED_SEQUENTIAL)
# What reports say of a job whose server's timings the client's clock contradicts
# (``farm.stats.clock``: the summary's ``clock_flag``), and of one whose speeds are the
# client's (``speed_clock``: a job on a commit's build).
CLOCKS_DISAGREE = "server timings disagree with the client's clock"
CLIENT_CLOCK = "speeds by the client's clock"


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, in the plural (``many``, default ``noun + "s"``) unless 1."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
