"""What a frontend running in a cluster reads from its kube-apiserver: the
aggregator's front-proxy CA, from ``kube-system/extension-apiserver-authentication``
(key ``requestheader-client-ca-file``), read at start and re-read while it runs,
as servers built on k8s.io/apiserver do. The pod's service account may read it
(the chart binds the ``extension-apiserver-authentication-reader`` Role)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping

from kubeclient import Client, ConfigError, KubeClientError, Target, in_cluster

log = logging.getLogger(__name__)

CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
CA_KEY = "requestheader-client-ca-file"
#: how often the ConfigMap is read again (a rotated front-proxy CA is trusted
#: within this many seconds)
REFRESH_SECONDS = 60.0


class ClusterError(RuntimeError):
    """The front-proxy CA cannot be read from the cluster; the message says why."""


def cluster_from_env(env: Mapping[str, str]) -> Target:
    """The kube-apiserver as a pod sees it (``kubeclient.in_cluster``)."""
    try:
        return in_cluster(env)
    except ConfigError as err:
        raise ClusterError(f"{err}: give --client-ca instead of --front-proxy-ca-from-cluster"
                           ) from err


async def front_proxy_ca(cluster: Target, *, timeout: float = 10.0) -> str:
    """The front-proxy CA bundle (PEM) the kube-apiserver publishes."""
    try:
        async with Client(cluster, timeout=timeout) as client:
            body = await client.json("GET", CONFIGMAP)
    except KubeClientError as err:
        raise ClusterError(f"reading kube-system/extension-apiserver-authentication: {err}"
                           ) from err
    pem = (body.get("data") or {}).get(CA_KEY, "")
    if "BEGIN CERTIFICATE" not in pem:
        raise ClusterError(f"kube-system/extension-apiserver-authentication has no {CA_KEY}:"
                           " is the aggregation layer enabled (--requestheader-client-ca-file)?")
    return pem


async def keep_trusting(cluster: Target, context: ssl.SSLContext, pem: str,
                        every: float = REFRESH_SECONDS) -> None:
    """Read the CA again every ``every`` seconds and trust a new one as soon as
    it appears (the old stays trusted until restart: the aggregator may still
    use it while both are published)."""
    while True:
        await asyncio.sleep(every)
        try:
            current = await front_proxy_ca(cluster)
        except ClusterError as err:
            log.warning("the front-proxy CA was not refreshed: %s", err)
            continue
        if current != pem:
            context.load_verify_locations(cadata=current)
            pem = current
            log.warning("the aggregator's front-proxy CA changed; trusting the new one")
