"""One quick look at the Hugging Face hub before downloading from it.

Without a network, `from_pretrained` and `load_dataset` retry for close to a minute before they
fail; one request with a short timeout tells the same in a second, so bad input (an unknown model
id, no data and no network) ends in one line at once. Users with a network still download.
"""

from __future__ import annotations

import functools
import os

PROBE_TIMEOUT = 10.0  # seconds: generous for a slow link, short next to a minute of retries


def hub_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it, but read now (the library reads it once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_problem(repo_id: str, repo_type: str = "model") -> str | None:
    """None when the hub serves `repo_id`; otherwise why it cannot, in a few words."""
    if hub_offline():
        return "HF_HUB_OFFLINE is set"
    return _ask_hub(repo_id, repo_type)


@functools.lru_cache(maxsize=None)
def _ask_hub(repo_id: str, repo_type: str) -> str | None:
    from huggingface_hub import repo_info
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        repo_info(repo_id, repo_type=repo_type, timeout=PROBE_TIMEOUT)
    except GatedRepoError:
        return None  # it exists; the download uses the user's token
    except RepositoryNotFoundError:
        return f"the hub has no {repo_type} {repo_id!r} (or it is private)"
    except Exception as exc:  # no network: the error class depends on the HTTP library the hub client uses
        return f"the hub cannot be reached ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return None
