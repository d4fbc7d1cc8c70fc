"""The one TLS context a client of a Kubernetes API uses: what kubectl
accepts, Python's ssl accepts. Pure but for reading the files it is given."""

from __future__ import annotations

import ssl


def client_context(*, ca_file: str | None = None, ca_pem: str | None = None,
                   cert_file: str | None = None, key_file: str | None = None,
                   verify: bool = True) -> ssl.SSLContext:
    """A client's TLS context trusting ``ca_file`` or ``ca_pem`` (the system's
    CAs when neither is given), with a client certificate when given.

    A certificate given as the authority is trusted itself, not only the CA
    that signed it: a partial chain, as Go's crypto/x509 (so kubectl) trusts
    any certificate in its pool. ``verify=False`` is kubeconfig's
    ``insecure-skip-tls-verify``."""
    context = ssl.create_default_context(cafile=ca_file, cadata=ca_pem)
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file and key_file:
        context.load_cert_chain(cert_file, key_file)
    return context
