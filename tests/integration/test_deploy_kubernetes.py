"""deploy/kubernetes/ offline: each object against Kubernetes' own schema (kubernetes-validate,
strict: an unknown key fails), KEDA's objects against KEDA's CRD schemas (vendored in
tests/fixtures/keda/, their source named in each), and the scaler's query against a real
PostgreSQL store, run as the worker role KEDA logs in as."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import psycopg
import pytest
import yaml
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from farm.store.models import Campaign, Job
from farm.store.roles import grant_worker
from workers.fleet.allocation import pending_jobs

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
KEDA = ROOT / "tests" / "fixtures" / "keda"
# The oldest Kubernetes whose pods run bubblewrap as written: user namespaces for pods
# (`hostUsers: false`) and `procMount: Unmasked` on by default.
KUBERNETES = "1.33.0"


def _objects() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            yield path.name, document


def _closed(schema: Any) -> Any:
    """The schema with unknown keys refused wherever it lists the known ones, as the API
    server's strict field validation does (a CRD's schema leaves them open)."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) for key, value in schema.items()}
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        closed["additionalProperties"] = False
    return closed


def _keda_schema(kind: str) -> dict[str, Any]:
    name = {"ScaledJob": "scaledjobs", "TriggerAuthentication": "triggerauthentications"}[kind]
    return dict(_closed(json.loads((KEDA / f"{name}.schema.json").read_text())))


def _scaled_job() -> dict[str, Any]:
    [found] = [body for _, body in _objects() if body["kind"] == "ScaledJob"]
    return found


def test_every_core_object_and_the_workers_job_are_valid_kubernetes() -> None:
    kinds = []
    for _, body in _objects():
        if body["apiVersion"].startswith("keda.sh/"):
            continue
        kinds.append(body["kind"])
        kubernetes_validate.validate(body, KUBERNETES, strict=True)
    assert sorted(kinds) == ["ConfigMap", "Secret"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "specfarm-worker"},
           "spec": _scaled_job()["spec"]["jobTargetRef"]}
    kubernetes_validate.validate(job, KUBERNETES, strict=True)


def test_keda_objects_are_valid_against_kedas_crd_schemas() -> None:
    kinds = []
    for _, body in _objects():
        if body["apiVersion"] == "keda.sh/v1alpha1":
            kinds.append(body["kind"])
            jsonschema.validate(body, _keda_schema(body["kind"]))
    assert sorted(kinds) == ["ScaledJob", "TriggerAuthentication"]


def test_the_validators_catch_a_misspelt_key() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
           "spec": _scaled_job()["spec"]["jobTargetRef"]}
    job["spec"]["template"]["spec"]["terminationGracePeriod"] = 300
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES, strict=True)
    scaled = _scaled_job()
    scaled["spec"]["trigers"] = scaled["spec"].pop("triggers")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, _keda_schema("ScaledJob"))


def test_the_worker_pod_is_what_the_sandbox_and_a_stop_need() -> None:
    spec = _scaled_job()["spec"]
    pod = spec["jobTargetRef"]["template"]["spec"]
    [worker] = pod["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["terminationGracePeriodSeconds"] >= 120
    assert pod["securityContext"]["seccompProfile"]["type"] == "Localhost"
    assert worker["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert worker["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"--exit-when-idle", "--name"} <= set(worker["args"])
    secrets = [item for item in worker["env"] if "secretKeyRef" in item.get("valueFrom", {})]
    assert {item["name"] for item in secrets} == {"FARM_DATABASE_URL", "FARM_BROKER_URL"}
    [trigger] = spec["triggers"]
    assert trigger["type"] == "postgresql" and "connection" not in trigger["metadata"]


def _job(campaign: Campaign, index: int, gpu_class: str, state: str, attempt: int) -> Job:
    return Job(campaign=campaign, job_key=f"{index:064d}", model_name="m", build_name="b",
               variant_name="v", varying={}, spec={}, gpu_class=gpu_class, state=state,
               attempt=attempt, max_attempts=3)


def test_the_scalers_query_counts_the_class_jobs_still_to_run_as_the_worker_role(
        pg_engine: Engine, postgres_url: str, worker_role: str) -> None:
    rows = [("h100", "queued", 0), ("h100", "lost", 1), ("h100", "running", 1),
            ("h100", "queued", 1),  # a retry waiting out its backoff: still to run
            ("h100", "lost", 3),  # out of attempts: the reaper fails it, nobody runs it
            ("h100", "done", 1), ("h100", "failed", 3), ("h100", "cancelled", 0),
            ("a100", "queued", 0), ("a100", "running", 1)]
    with Session(pg_engine) as session, session.begin():
        campaign = Campaign(name="scaler", matrix_path="scaler.yaml")
        session.add_all(_job(campaign, index, *row) for index, row in enumerate(rows))
    grant_worker(pg_engine, worker_role)
    query = _scaled_job()["spec"]["triggers"][0]["metadata"]["query"]
    as_worker = postgres_url.replace("postgres@", f"{worker_role}@", 1)
    with psycopg.connect(as_worker) as connection:
        [(count,)] = connection.execute(query).fetchall()
    # What a pod can take (the workers' own count) and what pods already run.
    assert count == pending_jobs(pg_engine, "h100") + 1 == 4
