"""Reading a broker's metrics endpoint (/metrics, /state-change-log: broker/http_endpoints.py) as
this process's client settings allow: on a secured cluster the endpoint is HTTPS with the
brokers' certificate and asks for an HTTP Basic login of a SCRAM user of the cluster
(broker/metrics_security.py), so the tools send the user and password of their sasl.username /
sasl.password (or sasl.jaas.config) and check the certificate against ssl.ca.location, the same
settings they reach the Kafka listeners with (client_config, --command-config).

The password goes only over TLS, or to a cluster whose settings use no TLS at all
(SASL_PLAINTEXT, where the operator chose plain connections): never in clear to an http URL of a
cluster the settings reach over TLS.
"""
from __future__ import annotations

import base64
import ssl
import urllib.request
from http.client import HTTPResponse
from urllib.parse import urlsplit

from odradek.client import client_config
from odradek.security.client_security import ClientSecurity


def basic_authorization(username: str, password: str) -> str:
    """The ``Authorization`` header value of an HTTP Basic login (RFC 7617, UTF-8)."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


def headers_for(url: str, security: ClientSecurity | None = None) -> dict[str, str]:
    """The headers a request to ``url`` carries: the login of ``security`` (the process's
    settings by default) when it has SASL credentials and the URL is https, or when the
    settings use no TLS at all."""
    security = security or client_config.security()
    if not security.uses_sasl or not security.username:
        return {}
    if urlsplit(url).scheme != "https" and security.uses_ssl:
        return {}
    return {"Authorization": basic_authorization(security.username, security.password)}


def tls_context(security: ClientSecurity | None = None) -> ssl.SSLContext | None:
    """The TLS context an https metrics URL is checked with: the settings' (their CA), None
    (the system's CAs) without TLS settings."""
    return (security or client_config.security()).ssl_context


def open_metrics(url: str, timeout: float, security: ClientSecurity | None = None) -> HTTPResponse:
    """urllib's urlopen of a broker's metrics URL with the settings' CA and login; its errors
    (urllib.error.URLError, HTTPError for 401 and 403, OSError) are the caller's."""
    request = urllib.request.Request(url, headers=headers_for(url, security))
    context = tls_context(security) if urlsplit(url).scheme == "https" else None
    response: HTTPResponse = urllib.request.urlopen(request, timeout=timeout, context=context)
    return response
