"""The controller: the tiering state machine, the disablement queue, the synchronous core and the process around it.

Layers, top to bottom (declared as the ``controller-layers`` import-linter contract in ``pyproject.toml``):

* ``service``: the process: the lease, the Kafka protocol server, the DisableRemoteTopic sender (asyncio);
* ``core``: :class:`~orchestrator.controller.core.ControllerCore`, the facade the service calls;
* ``admin`` | ``membership``: the admin API; broker registration, heartbeats and fencing;
* ``disablement``: DisableRemoteTopic out and in, completing topics;
* ``state``: the image, the queue and the one way to write (appends fenced by the controller epoch);
* ``responses`` | ``partitions``: response shaping; partition records, placement and leadership (pure);
* ``tiering`` | ``queue``: DESIGN §4's per-topic state machine and the disablement queue (pure).
"""
