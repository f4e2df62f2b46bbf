"""job.comparable_key, filled from each stored job spec

Revision ID: 0007
Revises: 0006
"""

# No `from __future__ import annotations`: Alembic loads a revision without putting it in
# sys.modules, where pydantic would look up string annotations.
import hashlib
import json
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from alembic import op
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_job = sa.table("job", sa.column("id", sa.Integer()), sa.column("spec", sa.JSON()),
                sa.column("comparable_key", sa.String(64)))

# A frozen copy of how the farm keyed a stored job spec at 6d1ce4e
# (farm.matrix.spec.JobSpec.comparable_key, with the bounds of farm.matrix.schema and the
# argv rule of farm.matrix.flags): the key of a spec must not change with the code. Fields
# and validators only; a spec these models refuse keeps no key, as with JobSpec.
_Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
_ClassName = Annotated[str, Field(min_length=1, max_length=100,
                                  pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
_FlagValue = str | bool


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=lambda name: name.replace("_", "-"),
                              frozen=True)

    temperature: float = Field(0.0, ge=0.0)
    seed: int = 42
    top_k: int | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(None, gt=0.0)


class _Prompt(_Frozen):
    id: _Name
    text: str
    category: str


class _ModelRef(_Frozen):
    name: _Name
    file: str | None = None
    path: str | None = None


class _BuildRef(_Frozen):
    name: _Name
    path: str | None = None


class _Arm(_Frozen):
    role: Literal["baseline", "variant"]
    name: str
    build: _BuildRef
    flags: tuple[tuple[str, _FlagValue], ...]

    @property
    def argv(self) -> list[str]:
        # True is a bare switch, False leaves the flag out.
        argv: list[str] = []
        for name, value in self.flags:
            if value is not False:
                argv += [f"--{name}"] if value is True else [f"--{name}", str(value)]
        return argv


class _JobSpec(_Frozen):
    campaign: _Name
    gpu_class: _ClassName
    model: _ModelRef
    baseline: _Arm
    variant: _Arm
    varying: dict[str, str | None]
    prompt_mode: Literal["chat", "completion"]
    prompts: tuple[_Prompt, ...]
    n_predict: Annotated[int, Field(ge=2, le=32768)]
    sampling: dict[str, Any]
    repetitions: Annotated[int, Field(ge=1, le=1000)]
    pairs: Annotated[int, Field(ge=1, le=100)]
    max_pairs: Annotated[int, Field(ge=1, le=100)]
    target_ci: Annotated[float, Field(gt=0.0, lt=1.0)]
    target_assurance: Annotated[float, Field(ge=0.5, lt=1.0)] | None = None
    control: bool = False
    stop: Literal["fixed", "natural"] = "fixed"
    concurrency: Annotated[int, Field(ge=1, le=64)] = 1
    prompt_length: Annotated[int, Field(ge=0, le=1_000_000)] = 0

    @field_validator("sampling")
    @classmethod
    def _known_sampling(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(_Sampling.model_fields))
        if unknown:
            raise ValueError(f"sampling: unknown fields {unknown}")
        _Sampling.model_validate({key.replace("_", "-"): item for key, item in value.items()})
        return value

    def comparable_key(self) -> str:
        # sha256 of sorted-key JSON over what the arms measure, with the variant's own build
        # only when it is not the baseline's (a fork).
        fork = None if self.variant.build.name == self.baseline.build.name \
            else self.variant.build.name
        experiment = {
            "gpu_class": self.gpu_class,
            "model": self.model.name,
            "baseline_argv": self.baseline.argv,
            "variant_argv": self.variant.argv,
            "prompt_mode": self.prompt_mode,
            "prompts": [prompt.text for prompt in self.prompts],
            "n_predict": self.n_predict,
            "sampling": self.sampling,
            **({"stop": self.stop} if self.stop != "fixed" else {}),
            **({"concurrency": self.concurrency} if self.concurrency != 1 else {}),
            "variant_build": fork,
        }
        canonical = json.dumps(experiment, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def _comparable_key(spec: object) -> str | None:
    # A spec from before builds moved into the arms (or from before the adaptive design)
    # cannot be read and keeps no key.
    try:
        return _JobSpec.model_validate(spec).comparable_key()
    except ValidationError:
        return None


def _fill_keys(batch: int = 500) -> None:
    # Page by id: specs carry every prompt, too many for memory in a large store.
    connection, last = op.get_bind(), 0
    while rows := connection.execute(sa.select(_job.c.id, _job.c.spec).where(_job.c.id > last)
                                     .order_by(_job.c.id).limit(batch)).all():
        keys = [{"job_id": job_id, "key": _comparable_key(spec)} for job_id, spec in rows]
        connection.execute(_job.update().where(_job.c.id == sa.bindparam("job_id"))
                           .values(comparable_key=sa.bindparam("key")), keys)
        last = rows[-1].id


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode may rebuild `job`, which a view reads
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("comparable_key", sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f("ix_job_comparable_key"), ["comparable_key"],
                              unique=False)
    _fill_keys()
    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_comparable_key"))
        batch_op.drop_column("comparable_key")
    create_views(VIEWS_0002)
