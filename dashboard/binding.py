"""Where the server listens: this machine only, unless the person starting it says otherwise.

The dashboard has no login, so the app checks ``server.address`` at start and serves nothing on a
non-loopback address unless that was asked for explicitly (``--server.address``,
``STREAMLIT_SERVER_ADDRESS`` or ``PROFILER_ALLOW_REMOTE=1``); an address that comes only from
Streamlit's default or a stray config file is not such a choice. No Streamlit imports here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

ALLOW_REMOTE_ENV = "PROFILER_ALLOW_REMOTE"
# Where Streamlit says an option was not chosen by the person starting the server.
NOT_CHOSEN = ("<default>", "<streamlit>")
UNIX_SOCKET_PREFIX = "unix://"


def is_local(address: str | None) -> bool:
    """Whether a server bound to ``address`` is reachable from this machine only (loopback, or a
    Unix socket). Unset means every interface; a host name other than localhost is not local."""
    text = (address or "").strip()
    if not text:
        return False
    if text.startswith(UNIX_SOCKET_PREFIX) or text.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(text.strip("[]")).is_loopback
    except ValueError:
        return False


def explicitly_chosen(where_defined: str) -> bool:
    """Whether the address came from the command line or an environment variable (Streamlit
    names a config file by its path, and a default by ``<default>``)."""
    return where_defined not in NOT_CHOSEN and not where_defined.endswith(".toml")


def remote_refusal(address: str | None, where_defined: str, environ: Mapping[str, str]) -> str:
    """'' when the dashboard may serve; otherwise one line saying why not and how to choose."""
    if is_local(address) or explicitly_chosen(where_defined):
        return ""
    if environ.get(ALLOW_REMOTE_ENV, "").strip() == "1":
        return ""
    shown_address = (address or "").strip()
    where = f"on {shown_address}" if shown_address else "on every network interface"
    source = ("server.address is not set" if where_defined in NOT_CHOSEN
              else f"server.address comes from {where_defined}")
    return (f"This server listens {where} ({source}), so anyone who can reach this machine could "
            "read its runs and start runs on its GPUs; nothing is served until you choose. To keep "
            "it on this machine, restart it with --server.address 127.0.0.1. To share it on "
            "purpose (a trusted network only: there is no login), restart it with "
            f"--server.address 0.0.0.0 on the command line, or set {ALLOW_REMOTE_ENV}=1.")
