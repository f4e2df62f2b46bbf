"""A worker's allocation: its options read, and its claims checked against a real store (the
estimate of a job from the finished attempts of the same measurement, else of its campaign's
class; a deadline that leaves less than it refuses the claim)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from farm.store.models import Campaign, Job
from workers.fleet.allocation import (
    GRACE,
    Allocation,
    Claims,
    estimate,
    parse_allocation,
    parse_deadline,
    pending_jobs,
)

NOW = datetime(2026, 12, 7, 18, 0, tzinfo=UTC)


def test_a_deadline_is_seconds_from_now_or_an_iso_time_in_utc() -> None:
    assert parse_deadline("90", NOW) == NOW + timedelta(seconds=90)
    assert parse_deadline("2026-12-07T20:00:00Z", NOW) == NOW + timedelta(hours=2)
    assert parse_deadline("2026-12-07T21:00:00+01:00", NOW) == NOW + timedelta(hours=2)
    assert parse_deadline("2030-01-01T00:00:00", NOW).tzinfo == UTC  # local time, made aware


def test_no_option_bounds_nothing_and_each_is_typed() -> None:
    assert parse_allocation(None, None, None, NOW) == Allocation()
    bounded = parse_allocation("300", "4", "3600", NOW)
    assert (bounded.exit_when_idle, bounded.max_jobs) == (300.0, 4)
    assert bounded.stop_at == NOW + timedelta(seconds=3600 - GRACE)


def _jobs(engine: Engine, spans: list[float | None], key: str = "k") -> list[int]:
    """A campaign of jobs of one measurement: done in ``spans`` seconds, or queued (None)."""
    with Session(engine) as session, session.begin():
        campaign = Campaign(name=f"c{len(spans)}{key}", matrix_path="m.yaml")
        jobs = [Job(campaign=campaign, job_key=f"{key}{index}".ljust(64, "0"), comparable_key=key,
                    model_name="m", build_name="b", variant_name="v", varying={}, spec={},
                    gpu_class="box", state="queued" if span is None else "done",
                    attempt=0 if span is None else 1,
                    started_at=None if span is None else NOW,
                    finished_at=None if span is None else NOW + timedelta(seconds=span))
                for index, span in enumerate(spans)]
        session.add_all(jobs)
        session.flush()
        return [job.id for job in jobs]


def test_the_estimate_is_the_median_of_the_same_measurement_else_nothing(
        pg_engine: Engine) -> None:
    *_, waiting = _jobs(pg_engine, [100, 300, 200, None])
    assert estimate(pg_engine, waiting) == 200
    [unknown] = _jobs(pg_engine, [None], key="other")
    assert estimate(pg_engine, unknown) is None
    assert pending_jobs(pg_engine, "box") == 2 and pending_jobs(pg_engine, "none") == 0


def test_a_claim_is_refused_when_the_estimate_ends_after_the_deadline_and_past_max_jobs(
        pg_engine: Engine) -> None:
    *_, waiting = _jobs(pg_engine, [600, None])
    tight = Claims(Allocation(deadline=NOW + timedelta(seconds=GRACE + 599)))
    reason = tight.refusal(pg_engine, waiting, NOW)
    assert reason is not None and "its estimate (600 s)" in reason and tight.out_of_time
    roomy = Claims(Allocation(deadline=NOW + timedelta(seconds=GRACE + 601), max_jobs=1))
    assert roomy.refusal(pg_engine, waiting, NOW) is None and not roomy.out_of_time
    roomy.counted()
    assert roomy.claimed == 1
    assert "(--max-jobs)" in str(roomy.refusal(pg_engine, waiting, NOW))
