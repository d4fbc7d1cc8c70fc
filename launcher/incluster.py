"""What a frontend running in a cluster reads from its kube-apiserver: the
aggregator's front-proxy CA, from ``kube-system/extension-apiserver-authentication``
(key ``requestheader-client-ca-file``), read at start and re-read while it runs,
as servers built on k8s.io/apiserver do. The pod's service account may read it
(the chart binds the ``extension-apiserver-authentication-reader`` Role).

One GET of one ConfigMap: aiohttp (already a dependency) with the service
account's token and CA, rather than a Kubernetes client library."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
CA_KEY = "requestheader-client-ca-file"
#: how often the ConfigMap is read again (a rotated front-proxy CA is trusted
#: within this many seconds)
REFRESH_SECONDS = 60.0


class ClusterError(RuntimeError):
    """The front-proxy CA cannot be read from the cluster; the message says why."""


@dataclass(frozen=True)
class Cluster:
    """The kube-apiserver as a pod sees it."""

    server: str
    token_file: Path
    ca_file: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Cluster:
        """From the variables the kubelet sets in every pod; the service
        account's files are in REPORTS_SERVICE_ACCOUNT_DIR if that is set
        (outside a pod), else where the kubelet mounts them."""
        service_account = Path(env.get("REPORTS_SERVICE_ACCOUNT_DIR") or SERVICE_ACCOUNT)
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise ClusterError("not in a Kubernetes pod (KUBERNETES_SERVICE_HOST is not set):"
                               " give --client-ca instead of --front-proxy-ca-from-cluster")
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", service_account / "token",
                   service_account / "ca.crt")


async def front_proxy_ca(cluster: Cluster, *, timeout: float = 10.0) -> str:
    """The front-proxy CA bundle (PEM) the kube-apiserver publishes."""
    try:
        token = cluster.token_file.read_text().strip()  # read each time: tokens rotate
        context = ssl.create_default_context(cafile=str(cluster.ca_file))
    except OSError as err:
        raise ClusterError(f"cannot read the service account's credentials: {err}") from err
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s, \
                s.get(cluster.server + CONFIGMAP, ssl=context,
                      headers={"Authorization": f"Bearer {token}"}) as response:
            if response.status != 200:
                raise ClusterError(f"reading kube-system/extension-apiserver-authentication:"
                                   f" HTTP {response.status}"
                                   f" {(await response.text())[:200]}")
            body = await response.json()
    except (aiohttp.ClientError, TimeoutError) as err:
        raise ClusterError(f"cannot reach the kube-apiserver at {cluster.server}: {err}"
                           ) from err
    pem = (body.get("data") or {}).get(CA_KEY, "")
    if "BEGIN CERTIFICATE" not in pem:
        raise ClusterError(f"kube-system/extension-apiserver-authentication has no {CA_KEY}:"
                           " is the aggregation layer enabled (--requestheader-client-ca-file)?")
    return pem


async def keep_trusting(cluster: Cluster, context: ssl.SSLContext, pem: str,
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
