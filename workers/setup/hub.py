"""Models from the Hugging Face Hub: a job's revision pinned to a commit, once.

`farm submit` and `farm run` pin every Hub model of a matrix (:func:`pin_specs`): the
revision as written (a branch, a tag, a commit) becomes the commit it names now, and the
file (every shard of a split GGUF) gets the size and sha256 the Hub states for it (its LFS
object id). The job stores both, so every node downloads the same bytes and checks them
(``workers.setup.download``). A pin is also written into the downloads dir, so that an
offline node can pin a revision it pinned before (and says it did).

The token is this node's (``HF_TOKEN``, read by the settings): it goes to the Hub only,
never into a job, never to llama-server (whose environment is an allow-list).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx2
from huggingface_hub import HfApi
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from farm.errors import ConfigError, FarmError, ModelUnavailable
from farm.matrix.files import under
from farm.matrix.schema import split_shards
from farm.matrix.spec import JobSpec, ModelRef, RemoteFile
from farm.settings import Settings
from workers.paths import HUB_DIR

TOKEN_VARIABLE = "HF_TOKEN"
# What huggingface_hub lets through when the Hub cannot be reached at all: its HTTP
# client's transport errors (refused, reset, timed out) and OSErrors (its size check).
UNREACHABLE = (OSError, httpx2.TransportError)


@dataclass(frozen=True)
class HubAccess:
    """How this node reaches the Hub: its endpoint, its token, whether it is offline."""

    endpoint: str
    token: str | None = None
    offline: bool = False

    @classmethod
    def of(cls, settings: Settings) -> HubAccess:
        """The node's Hub settings (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE)."""
        token = settings.hf_token.get_secret_value() if settings.hf_token else None
        return cls(endpoint=settings.hf_endpoint.rstrip("/"), token=token,
                   offline=settings.hf_offline)

    def api(self) -> HfApi:
        """A Hub client with this node's token only (``False``: none read from disk)."""
        return HfApi(endpoint=self.endpoint, token=self.token or False)


def hub_error(model: ModelRef, exc: Exception, hub: HubAccess) -> FarmError:
    """What a Hub error means for ``model``, in one line with the fix."""
    where = f"model {model.name!r} ({model.source})"
    status = exc.response.status_code if isinstance(exc, HfHubHTTPError) and \
        exc.response is not None else None
    if isinstance(exc, GatedRepoError) or status in (401, 403):
        token = (f"the token in {TOKEN_VARIABLE} was refused" if hub.token
                 else "this node has no token")
        return ModelUnavailable(
            f"{where}: the Hub answered {status or 401} (a gated or private repository) and "
            f"{token}: accept the model's terms on the Hub and set {TOKEN_VARIABLE} in this "
            "node's environment (never in a matrix)")
    if isinstance(exc, RevisionNotFoundError):
        return ConfigError(f"{where}: no revision {model.revision!r} in {model.hf}; give a "
                           "branch, tag or commit of the repository")
    if isinstance(exc, RepositoryNotFoundError):
        return ConfigError(f"{where}: no repository {model.hf!r} on the Hub (or it is "
                           f"private: set {TOKEN_VARIABLE}); check `hf:`")
    if status is not None:
        # 5xx and 429 pass by themselves; another 4xx (a file gone from its commit) won't.
        return ModelUnavailable(f"{where}: the Hub answered {status} "
                                f"({str(exc).splitlines()[0]}); try again later",
                                transient=status >= 500 or status in (408, 429))
    return ModelUnavailable(f"{where}: the Hub could not be reached ({exc}); run again "
                            "online, or pin `revision:` to a commit this node pinned before",
                            transient=True)


def _pin_file(downloads_dir: Path, model: ModelRef, revision: str) -> Path:
    return under(downloads_dir, HUB_DIR, (model.hf or "").replace("/", "--"), "pins",
                 f"{quote(revision, safe='')}.json", what=f"pin of {model.hf}")


def _record(downloads_dir: Path, model: ModelRef, pinned: ModelRef) -> None:
    """Remember a pin (by the revision as written and by its commit), written whole."""
    body = json.dumps({"file": pinned.file, "commit": pinned.revision,
                       "files": [item.model_dump() for item in pinned.files]})
    for revision in dict.fromkeys([model.revision or "main", pinned.revision or ""]):
        target = _pin_file(downloads_dir, model, revision)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(body, encoding="utf-8")
        partial.replace(target)


def _recorded(downloads_dir: Path, model: ModelRef) -> ModelRef | None:
    target = _pin_file(downloads_dir, model, model.revision or "main")
    if not target.is_file():
        return None
    data = json.loads(target.read_text(encoding="utf-8"))
    if data.get("file") != model.file:
        return None
    return model.model_copy(update={"revision": data["commit"], "files": tuple(
        RemoteFile.model_validate(item) for item in data["files"])})


def _from_hub(model: ModelRef, hub: HubAccess) -> ModelRef:
    """The model pinned by the Hub's revision API: the commit and each file's LFS sha256."""
    assert model.hf is not None and model.file is not None
    try:
        info = hub.api().model_info(model.hf, revision=model.revision, files_metadata=True)
    except (HfHubHTTPError, *UNREACHABLE) as exc:
        raise hub_error(model, exc, hub) from exc
    siblings = {sibling.rfilename: sibling for sibling in info.siblings or []}
    files = []
    for name in split_shards(model.file):
        sibling = siblings.get(name)
        if sibling is None:
            ggufs = sorted(n for n in siblings if n.endswith(".gguf"))[:20]
            raise ConfigError(f"model {model.name!r}: {model.hf}@{model.revision} has no file "
                              f"{name!r}; its GGUF files: {', '.join(ggufs) or 'none'}")
        if sibling.lfs is None:
            raise ConfigError(f"model {model.name!r}: {model.hf} file {name!r} is not stored "
                              "in LFS, so the Hub states no sha256 to check it against")
        files.append(RemoteFile(name=name, sha256=sibling.lfs.sha256, size=sibling.lfs.size))
    return model.model_copy(update={"revision": info.sha, "files": tuple(files)})


def pin_model(model: ModelRef, hub: HubAccess, downloads_dir: Path,
              say: Callable[[str], None]) -> ModelRef:
    """``model`` with its revision a commit and its files' sha256, from the Hub (and
    recorded here), or offline from a pin recorded here before; a URL or local model as
    it is."""
    if model.hf is None or model.pinned:
        return model
    if not hub.offline:
        pinned = _from_hub(model, hub)
        _record(downloads_dir, model, pinned)
        return pinned
    recorded = _recorded(downloads_dir, model)
    if recorded is None:
        raise ModelUnavailable(
            f"model {model.name!r} ({model.source}): this node is offline (HF_HUB_OFFLINE) "
            f"and never pinned revision {model.revision!r} here; pin it online once (`farm "
            "prepare`, `farm run`), or give the commit a node pinned")
    say(f"model {model.name}: offline, revision {model.revision} is commit "
        f"{recorded.revision} as pinned on this node before")
    return recorded


def with_models(spec: JobSpec, model: ModelRef, drafts: tuple[ModelRef, ...]) -> JobSpec:
    """``spec`` with its model and draft models replaced, its keys computed anew (a copy
    would keep the old)."""
    return JobSpec.model_validate({**spec.model_dump(), "model": model.model_dump(),
                                   "draft_models": [draft.model_dump() for draft in drafts]})


def pin_specs(specs: list[JobSpec], hub: HubAccess, downloads_dir: Path,
              say: Callable[[str], None]) -> list[JobSpec]:
    """Every job with its Hub models (the model, its draft models) pinned, each distinct
    one asked of the Hub once; jobs that pin to the same job (``main`` and its commit)
    are kept once."""
    pinned: dict[str, ModelRef] = {}

    def pin(model: ModelRef) -> ModelRef:
        if model.hf is None or model.pinned:
            return model
        key = model.model_dump_json()
        if key not in pinned:
            pinned[key] = pin_model(model, hub, downloads_dir, say)
            say(f"model {model.name}: {model.hf}@{model.revision} is commit "
                f"{pinned[key].revision}")
        return pinned[key]

    jobs: dict[str, JobSpec] = {}
    for spec in specs:
        if any(m.hf is not None and not m.pinned for m in (spec.model, *spec.draft_models)):
            spec = with_models(spec, pin(spec.model), tuple(map(pin, spec.draft_models)))
        jobs.setdefault(spec.job_key, spec)
    return list(jobs.values())
