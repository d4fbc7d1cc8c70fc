"""Storage errors as the API's: the one place where what a port raises
(``pipeline.model.storage``) becomes a Kubernetes ``Status``."""

from __future__ import annotations

from apiserver.contract.errors import ApiError, BadRequest, FromStatus, Gone, Timeout, Unavailable
from pipeline.model import storage


def api_error(err: storage.StorageError) -> ApiError:
    """The API error a storage error is answered with."""
    if isinstance(err, storage.Refused):
        return FromStatus(err.status)  # the committer's decision, as it worded it
    if isinstance(err, storage.Unavailable):
        return Unavailable(err.message, retry_after=err.retry_after)
    if isinstance(err, storage.Expired):
        return Gone(str(err))
    if isinstance(err, storage.AnalyticsTimeout):
        return Timeout(str(err))
    if isinstance(err, storage.QueryError):
        return BadRequest(f"the query failed: {err}")
    if isinstance(err, storage.StoreError):
        return Unavailable(f"storage is unavailable: {err}", retry_after=1)
    return ApiError(f"storage failed: {err}")
