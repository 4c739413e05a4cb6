"""A server adapter: the launch, log and client parts of one kind of LLM server, in one class.

Each part is its own interface, documented in its module, and each caller takes the part it
uses: the runner builds the command line from :class:`~engine.servers.launch.LaunchArgs`, the
boot watcher, the console and ``ruler facts`` read logs through
:class:`~engine.servers.logs.LogReader`, and the boot probe, the load generator, the metrics
scrape and the quality phase talk to the server through
:class:`~engine.servers.client.ServerClient`.

A new server is a package ``engine/servers/<name>/`` holding one class per part (``launch.py``,
``logs.py``, ``client.py``, each deriving from its part's base) and, in its ``__init__``, the
adapter: a class deriving from those three and :class:`ServerAdapter`, which sets ``name``.
Together they implement the abstract methods of the three parts (an abstract one left out makes
the class fail to instantiate); the adapter is registered by name in :mod:`engine.servers`.
"""

from __future__ import annotations

from engine.servers.client import ServerClient
from engine.servers.launch import LaunchArgs
from engine.servers.logs import LogReader


class ServerAdapter(LaunchArgs, LogReader, ServerClient):
    """Everything ruler knows about one kind of LLM server."""

    name: str  # the ``server:`` field of a campaign
