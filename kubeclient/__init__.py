"""The one Kubernetes client of every command that talks to a Kubernetes API
(migrate, serving in a cluster, the benchmark, trends and the dashboard):
kubeconfig and service-account loading (``config``, on kubernetes_asyncio's
loader), one TLS context builder (``tls``), requests and watches with
retries (``client``) and one error tree (``errors``).

It knows nothing of reports or of the rest of the project, and holds no
global state: each caller makes its own ``Client``."""

from kubeclient.client import Client, retry_after
from kubeclient.config import IN_CLUSTER, Target, from_kubeconfig, in_cluster, target
from kubeclient.errors import (
    JSON,
    APIClientError,
    APIConflictError,
    APIError,
    APIForbiddenError,
    APIGoneError,
    APIInvalidError,
    APINotFoundError,
    APIServerError,
    APITooManyRequestsError,
    APIUnauthorizedError,
    ConfigError,
    ConnectionFailed,
    KubeClientError,
    failure_reason,
)
from kubeclient.tls import client_context

__all__ = [
    "IN_CLUSTER", "JSON", "APIClientError", "APIConflictError", "APIError", "APIForbiddenError",
    "APIGoneError", "APIInvalidError", "APINotFoundError", "APIServerError",
    "APITooManyRequestsError", "APIUnauthorizedError", "Client", "ConfigError",
    "ConnectionFailed", "KubeClientError", "Target", "client_context", "failure_reason",
    "from_kubeconfig", "in_cluster", "retry_after", "target",
]
