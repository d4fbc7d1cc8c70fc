"""Where a Kubernetes API is and how to authenticate to it: a kubeconfig read
as kubectl reads it, or a pod's service account.

kubernetes_asyncio's loader does the reading: ``$KUBECONFIG`` lists merged
(the first file to set a cluster, context, user or current-context wins), the current or a
chosen context, ``certificate-authority`` and ``-data``, client certificates
and keys in files or inline (paths relative to the file that names them),
``insecure-skip-tls-verify``, ``tls-server-name``, tokens, ``tokenFile``,
exec plugins and basic auth. What it does not do as kubectl does is done
here: the TLS context (``kubeclient.tls``: partial chains), a ``tokenFile``
read again as it rotates, and a one-line error for what is not supported.

The library's generated client takes most of a second to import; it is
imported where a configuration is loaded, not where this module is."""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubeclient.errors import ConfigError
from kubeclient.tls import client_context

#: the source that names a pod's own service account
IN_CLUSTER = "in-cluster"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = Path("~/.kube/config")


@dataclass(frozen=True)
class Target:
    """One Kubernetes API server, as a client reaches it."""

    server: str
    context: ssl.SSLContext
    #: what it was read from, for messages ("kubeconfig FILE", "in-cluster")
    source: str
    #: the name the server's certificate carries, when not the address's
    tls_server_name: str | None = None
    #: the Authorization header's value for the next request (read anew:
    #: tokens rotate), or None
    authorization: Callable[[], Awaitable[str | None]] | None = None

    async def headers(self) -> dict[str, str]:
        value = await self.authorization() if self.authorization else None
        return {"Authorization": value.strip()} if value else {}


async def target(source: str | Path | None, env: Mapping[str, str] | None = None, *,
                 context: str | None = None) -> Target:
    """``source`` read as kubectl reads ``--kubeconfig`` (None: ``$KUBECONFIG``
    or ``~/.kube/config``), or ``in-cluster``: the pod's service account."""
    env = os.environ if env is None else env
    if str(source) == IN_CLUSTER:
        return in_cluster(env)
    return await from_kubeconfig(source, env, context=context)


def kubeconfig_paths(source: str | Path | None, env: Mapping[str, str]) -> list[Path]:
    """The files kubectl reads: ``source`` alone, else each of ``$KUBECONFIG``
    that exists, else ``~/.kube/config``. Pure but for looking at the files."""
    if source is not None and str(source):
        return [Path(source).expanduser()]
    listed = [Path(p).expanduser() for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return [p for p in listed if p.exists()] or listed[:1]
    return [DEFAULT_KUBECONFIG.expanduser()]


async def from_kubeconfig(source: str | Path | None, env: Mapping[str, str], *,
                          context: str | None = None) -> Target:
    from kubernetes_asyncio.client.configuration import Configuration
    from kubernetes_asyncio.config.config_exception import ConfigException
    from kubernetes_asyncio.config.kube_config import KubeConfigLoader, KubeConfigMerger

    paths = kubeconfig_paths(source, env)
    name = "kubeconfig " + os.pathsep.join(map(str, paths))
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise ConfigError(f"cannot use the {name}: {missing[0]} does not exist")
    try:
        merged = KubeConfigMerger(os.pathsep.join(map(str, paths)))
        loader = KubeConfigLoader(config_dict=merged.config, config_base_path=None,
                                  active_context=context or _first_current(merged))
        current = loader.current_context or {}
        cluster, user = (_entry(merged.config, kind, (current.get("context") or {}).get(key))
                         for kind, key in (("clusters", "cluster"), ("users", "user")))
        _supported(cluster[0], user[0])
        configuration = Configuration()
        await loader.load_and_set(configuration)
    except ConfigError as err:
        raise ConfigError(f"cannot use the {name}: {err}") from err
    except (ConfigException, OSError, KeyError, TypeError, ValueError, AttributeError,
            yaml.YAMLError, ssl.SSLError) as err:
        raise ConfigError(f"cannot use the {name}: {_one_line(err)}") from err
    token_file = user[0].get("tokenFile")
    authorization: Callable[[], Awaitable[str | None]]
    if token_file and not user[0].get("token") and "exec" not in user[0]:
        path = Path(user[1]).parent / token_file if user[1] else Path(token_file)

        async def authorization() -> str | None:
            return "Bearer " + path.read_text().strip()  # read each time: tokens rotate
    else:
        async def authorization() -> str | None:
            # a token, an exec plugin's, or basic auth ("Basic ...")
            found: str | None = await configuration.get_api_key_with_prefix("BearerToken")
            return found
    return Target(str(configuration.host).rstrip("/"), _context(configuration, name), name,
                  configuration.tls_server_name or None, authorization)


def in_cluster(env: Mapping[str, str]) -> Target:
    """From the variables the kubelet sets in every pod; the service account's
    files are in REPORTS_SERVICE_ACCOUNT_DIR if that is set (outside a pod),
    else where the kubelet mounts them. The token is read again each minute."""
    from kubernetes_asyncio.client.configuration import Configuration
    from kubernetes_asyncio.config.config_exception import ConfigException
    from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

    if not env.get("KUBERNETES_SERVICE_HOST") or not env.get("KUBERNETES_SERVICE_PORT"):
        raise ConfigError("not in a Kubernetes pod (KUBERNETES_SERVICE_HOST is not set)")
    account = Path(env.get("REPORTS_SERVICE_ACCOUNT_DIR") or SERVICE_ACCOUNT)
    configuration = Configuration()
    try:
        InClusterConfigLoader(token_filename=str(account / "token"),
                              cert_filename=str(account / "ca.crt"),
                              environ=dict(env)).load_and_set(configuration)
    except (ConfigException, OSError) as err:
        raise ConfigError(f"cannot use the pod's service account ({account}):"
                          f" {_one_line(err)}") from err

    async def authorization() -> str | None:
        found: str | None = await configuration.get_api_key_with_prefix("BearerToken")
        return found
    return Target(str(configuration.host), _context(configuration, IN_CLUSTER), IN_CLUSTER,
                  authorization=authorization)


def _first_current(merged: Any) -> str | None:
    """The current-context of the first file that sets one: kubectl's rule
    for every value of a list (the loader takes the last file's)."""
    for path in merged.paths:
        found = (merged.config_files.get(path) or {}).get("current-context")
        if found:
            return str(found)
    return None


def _entry(config: Any, kind: str, name: str | None) -> tuple[dict[str, Any], str | None]:
    """The named cluster or user of a merged kubeconfig (its body, and the
    file that named it), or an empty one."""
    for node in (config.value.get(kind) or []) if config is not None else []:
        value = getattr(node, "value", node)
        if isinstance(value, dict) and value.get("name") == name:
            body = value.get(kind[:-1]) or {}
            return (body if isinstance(body, dict) else {}), getattr(node, "path", None)
    return {}, None


def _supported(cluster: dict[str, Any], user: dict[str, Any]) -> None:
    if cluster.get("proxy-url"):
        raise ConfigError(f"proxy-url ({cluster['proxy-url']}) is not supported: reach the"
                          " server directly, or through kubectl port-forward")
    if user.get("auth-provider"):
        name = (user["auth-provider"] or {}).get("name", "?")
        raise ConfigError(f"the auth-provider {name} is not supported: use a token, a client"
                          " certificate or an exec plugin (kubectl's own auth-providers were"
                          " removed in 1.26)")


def _context(configuration: Any, name: str) -> ssl.SSLContext:
    try:
        return client_context(ca_file=configuration.ssl_ca_cert or None,
                              cert_file=configuration.cert_file or None,
                              key_file=configuration.key_file or None,
                              verify=bool(configuration.verify_ssl))
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"cannot use the {name}: its certificates: {_one_line(err)}"
                          ) from err


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:300]
