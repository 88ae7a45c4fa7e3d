"""The controller: the tiering state machine, the retry queue, the synchronous core and the process around it.

Layers, top to bottom (declared as the ``controller-layers`` import-linter contract in ``pyproject.toml``):

* ``service``: the process, which wires its rooms and runs their lifecycle;
* ``admin_dispatch`` | ``sender`` | ``snapshot_loop``: the admin API by table; the requests to brokers, by a table of
  request kinds (asyncio); the snapshot loop;
* ``host``: what the process gives those rooms (the active core, its thread, stepping down);
* ``lease`` | ``core``: the election; :class:`~orchestrator.controller.core.ControllerCore`, the facade the service
  calls;
* ``admin`` | ``membership`` | ``security_admin``: the admin API; broker registration, heartbeats and fencing; ACLs
  and SCRAM users;
* ``disablement`` | ``topic_deletion``: DisableRemoteTopic and DeleteRemotePartitions out and in, completing jobs;
* ``queue_walk``: how both walk their queue, only when something can be due;
* ``state``: the image, the disablement queue and the one way to write (appends fenced by the controller epoch);
* ``partitions``: partition records, placement and leadership (pure);
* ``disablement_queue`` | ``deletion_queue``: the two policies of the retry queue: who owes the work, when it is done;
* ``tiering`` | ``retry_queue``: ARCHITECTURE §4's per-topic state machine and the retry queue's machine (pure).
"""
