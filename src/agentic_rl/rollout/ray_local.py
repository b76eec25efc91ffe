"""Start (or join) the Ray that env and generation workers run on, without opening it to the network.

A private local Ray (``scale.ray_address`` empty, the default) is started by :func:`init_ray`
with every server on the loopback interface and token authentication on:

* **Loopback.** Ray's C++ servers (GCS, raylet's node manager and object manager, each worker's
  core-worker server) listen on ``127.0.0.1`` exactly when the node's IP address *is*
  ``127.0.0.1``, and on every interface otherwise. On Linux ``ray.init`` replaces a
  ``_node_ip_address`` of ``127.0.0.1`` with the host's routable address unless Ray clusters are
  switched off (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, what Ray itself does on macOS and
  Windows to keep a laptop's Ray off the network). :func:`init_ray` switches them off for the
  start of the private Ray only (the environment variable its servers inherit, and Ray's cached
  constant, both restored afterwards), asks for ``_node_ip_address="127.0.0.1"``, no dashboard
  (``include_dashboard=False``, ``dashboard_host="127.0.0.1"``), and then checks that the node
  Ray reports is the loopback one. Measured with Ray 2.60 on Linux: 7 listening sockets, all on
  ``127.0.0.1`` (on ``*`` before).
* **Token authentication** (``RAY_AUTH_MODE=token``): Ray 2.60 turns it on for every new local
  cluster unless ``RAY_AUTH_MODE`` says otherwise (``ray.init`` sets the variable and reloads
  its cached config; setting it here before ``ray.init`` would leave this process's cached
  config at "disabled" and its own calls without the token). Ray then refuses any gRPC
  call without the cluster's token (``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH``, or Ray's default
  ``~/.ray/auth_token``, created on first use, which :func:`init_ray` makes 0600). Loopback keeps
  other hosts out; the token keeps out other local users who can reach loopback ports but cannot
  read the token file. An explicit ``RAY_AUTH_MODE`` in the environment is respected; a private
  Ray without token authentication is logged as a warning.

A user-given ``ray_address`` joins a cluster started by someone else: how that cluster listens
and authenticates is decided where it was started (``ray start --head``), not here; see
``docs/scale_out.md`` ("Security").
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from agentic_rl.errors import AgenticRLError

__all__ = ["LOOPBACK", "init_ray"]

log = logging.getLogger(__name__)

#: the address every server of a private local Ray listens on
LOOPBACK = "127.0.0.1"
#: Ray's switch for multi-node clusters; off, a local node uses the loopback address
_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_AUTH_MODE = "RAY_AUTH_MODE"


def _start_loopback(ray: Any, **kwargs: Any) -> None:
    """``ray.init`` of a new local node on ``127.0.0.1``, with Ray's cluster switch off during
    the start only (its servers inherit the environment then; later ``ray.init`` calls of this
    process that join real clusters see the switch as it was)."""
    from ray._private import ray_constants

    saved_env = os.environ.get(_CLUSTER_SWITCH)
    saved_constant = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[_CLUSTER_SWITCH] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(
            address="local",
            _node_ip_address=LOOPBACK,
            include_dashboard=False,
            dashboard_host=LOOPBACK,
            **kwargs,
        )
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_constant
        if saved_env is None:
            os.environ.pop(_CLUSTER_SWITCH, None)
        else:
            os.environ[_CLUSTER_SWITCH] = saved_env


def _private_default_token() -> None:
    """Make Ray's default token file (``~/.ray/auth_token``, written 0644 by Ray) readable by its
    owner only, when no other token source is set. Never raises."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    path = Path.home() / ".ray" / "auth_token"
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
    except OSError:
        pass


def init_ray(address: str | None = None, *, num_cpus: int | None = None) -> None:
    """Connect this process to Ray: join ``address``, or start a private local Ray on loopback
    with token authentication (module docstring) when ``address`` is None or empty.

    Args:
        address: ``"auto"``, ``"host:port"`` or ``"ray://host:port"`` of a running cluster; None
            or ``""`` for a private local Ray.
        num_cpus: logical CPUs of the private Ray (None: Ray counts the machine's); ignored
            when joining.

    Raises:
        AgenticRLError: the private Ray came up on a non-loopback address (a Ray whose
            start-up no longer honours the loopback switch; it is shut down first).
        ConnectionError, RuntimeError, ValueError: from ``ray.init``.
    """
    import ray

    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        return
    _start_loopback(ray, num_cpus=num_cpus, log_to_driver=False)
    if os.environ.get(_AUTH_MODE, "").lower() != "token":
        log.warning(
            "the private Ray runs without token authentication (RAY_AUTH_MODE=%s): any local "
            "user can run code through it as this user",
            os.environ.get(_AUTH_MODE),
        )
    _private_default_token()
    node_ip = ray.util.get_node_ip_address()
    if node_ip != LOOPBACK:
        ray.shutdown()
        raise AgenticRLError(
            f"the private Ray started on {node_ip}, not on {LOOPBACK}: this Ray version "
            "ignores the loopback switch, and its servers would listen on every interface; "
            "start one yourself ('RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head') and "
            "pass its address"
        )
