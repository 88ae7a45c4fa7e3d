"""``tieredctl``: the ops CLI (ARCHITECTURE §8), one module per noun.

- ``root``: the ``tieredctl`` group (``--output``, ``--bootstrap-server``), the table of nouns loaded lazily, error
  translation and :func:`main`, the console script;
- ``command``: the click classes of the nouns and their commands, which take the global options after the command
  as well;
- ``context``: what every command receives: the output and the way to the cluster; ``session``: the one client
  session (and event loop) all the requests of one command share;
- ``views``: what a command shows, as values; ``render_text`` and ``render_json``: one renderer per format;
  ``output``: the :class:`~orchestrator.cli.output.Output` a command hands its views to;
- ``options``: options several commands share, declared once; ``progress``: progress bars; ``bucket``: where the
  bucket is and listing it into an inventory;
- the nouns: ``controller``, ``broker``, ``local_cluster`` (``tieredctl cluster``), ``topic``, ``tiering``,
  ``configs``, ``inventory``, ``scan``, ``reclaim``.

Every command exits 0 on success, 1 when a request failed (stderr names the error and what to do), 2 on a usage
error and 3 when ``scan run`` found anomalies over its threshold. stdout carries only the result (text for people,
or one JSON document with ``--output json``); progress, warnings and errors go to stderr.
``--bootstrap-server`` (or ``TIEREDCTL_BOOTSTRAP_SERVER``) is a Kafka-style list of controller addresses.
"""

from orchestrator.cli.root import cli, main

__all__ = ["cli", "main"]
