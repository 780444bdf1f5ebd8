"""The Hugging Face hub: whether a name is a hub id, whether the hub can serve it now (one
quick try, no retries), and what of it is already on this machine."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ModelLoadError

HUB_PROBE_TIMEOUT_S = 10


def hub_access(path: str, instead: str = "pass a local path to a downloaded model instead") -> bool:
    """Fail fast on a hub id the hub cannot provide: offline, or unreachable on a first quick
    try (transformers would retry for ~25 s, a warning per try, before the same error); the
    error ends with ``instead``, the fix. True: load from the Hugging Face cache only (a cached
    copy needs no hub)."""
    if not is_hub_id(path):
        return False
    reason = hub_problem(path)
    if reason is None:
        return False
    if files_on_this_machine(path) is not None:
        return True
    raise ModelLoadError(f"model {path!r} is not a local directory nor in the Hugging Face cache, and the hub is {reason}: "
                         f"{instead}")


def is_hub_id(path: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if Path(path).expanduser().exists() or looks_local(path):
        return False
    try:
        validate_repo_id(path)
    except HFValidationError:
        return False
    return True


def hub_problem(repo_id: str, repo_type: str | None = None) -> str | None:
    """Why the hub cannot serve ``repo_id`` now ("offline (...)", "unreachable (...)"), found
    in one quick try; None if it answers."""
    return "offline (HF_HUB_OFFLINE is set)" if _hub_offline() else _hub_unreachable(repo_id, repo_type)


def _hub_offline() -> bool:
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any((v or "").strip().upper() in ("1", "ON", "YES", "TRUE") for v in flags)


def _hub_unreachable(repo_id: str, repo_type: str | None = None) -> str | None:
    """One try, no retries: ``"unreachable (...)"`` unless the hub answers (any HTTP answer,
    even 404, counts: transformers then explains it)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "README.md" if repo_type == "dataset" else "config.json", repo_type=repo_type),
                             timeout=HUB_PROBE_TIMEOUT_S)
    except HfHubHTTPError:
        return None
    except Exception as e:  # noqa: BLE001 -- no HTTP answer at all (DNS, refused, timeout, proxy): what the hub retries
        return f"unreachable ({(str(e).strip().splitlines() or [type(e).__name__])[0]})"
    return None


def looks_local(path: str) -> bool:
    return path.startswith((".", "/", "~")) or os.sep in path.strip("/").replace("/", "", 1)


def files_on_this_machine(path: str) -> Path | None:
    if Path(path).is_dir():
        return Path(path)
    if not is_hub_id(path):
        return None
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(path, "config.json")
    return Path(cached).parent if isinstance(cached, str) else None
