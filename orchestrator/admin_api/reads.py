"""The admin reads every node answers from its own metadata image: Metadata, DescribeConfigs, DescribeCluster.

A Kafka client sends these to any node it knows of (the "least loaded" one), not only to the controller, so the
active controller, a standby and every broker answer them alike, each from its image (the active controller's
core image, the others' follower image, refreshed from the store before each answer so a write the controller
acknowledged is seen by the next read on any node).

Pure: functions of an image, a :class:`ClusterView` and the request; no I/O.

Invariants:
* Every node names the same nodes: the unfenced brokers that have an endpoint, plus the active controller (the
  lease holder, while its lease runs), so the node lists a client merges never disagree. Standby controllers are
  not listed: no node but themselves knows them (they are in no record); a client reaches them only through its
  bootstrap list.
* Kafka clients send admin writes to the node named ``controller_id``, and keep that id until a request to it fails
  with NOT_CONTROLLER (a lost connection is just an error to most of them). So, as KRaft brokers do (KIP-590),
  Metadata and DescribeCluster for brokers name a broker there, the lowest unfenced broker id, which forwards the
  writes to whichever controller is active (:mod:`orchestrator.admin_api.forwarding`): a controller failover never
  leaves a client holding the id of a dead node. Only a cluster without a live broker names the active controller
  itself (-1 while none holds the lease).
* DescribeCluster with endpoint type 2 (controllers, KIP-919) names the active controller as ``controller_id``
  and lists it: this is how our own clients (:class:`orchestrator.net.admin.AdminClient`) find it.
* Reads never write, and Metadata never creates a topic (``allow_auto_topic_creation`` is ignored).
* DescribeConfigs' config sources are Kafka's ids: a topic config is TOPIC if set on the topic, else DEFAULT; a
  broker config is DYNAMIC_BROKER.
* DescribeCluster lists, for endpoint type 1 (brokers), the same nodes and ``controller_id`` as Metadata; for 2
  (controllers), the active controller (the only controller the metadata knows of); any other type is
  UNSUPPORTED_ENDPOINT_TYPE.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from orchestrator.errors import InvalidRequest, KafkaError, UnsupportedEndpointType
from orchestrator.ids import validate_topic_name
from orchestrator.metadata.image import MetadataImage, topic_for
from orchestrator.metadata.records import ConfigResourceType
from orchestrator.metadata.store import Lease
from orchestrator.metadata.topic_configs import effective
from orchestrator.protocol import messages as m

from .responses import Nodes, broker_config_entry, metadata_brokers, metadata_topic, normalized, topic_config_entry

ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2
NO_CONTROLLER = -1


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Who is in the cluster, as every node tells a client: see the module's invariants."""

    cluster_id: str
    nodes: Nodes
    controller_id: int  # the node clients send admin writes to (a broker that forwards them, see above)
    controllers: Nodes  # the active controller, when one holds the lease
    active_controller_id: int = NO_CONTROLLER


def parse_holder(holder: str) -> tuple[int, str, int] | None:
    """``"<node_id>@<host>:<port>"`` (a lease holder) -> (node id, host, port); None if it is not a controller's."""
    try:
        node, addr = holder.split("@", 1)
        host, port = addr.rsplit(":", 1)
        return int(node), host, int(port)
    except ValueError:
        return None


def live_holder(lease: Lease | None, now_ms: int) -> str | None:
    """The holder of ``lease`` while it runs; None when there is no lease or it expired."""
    return lease.holder if lease is not None and not lease.expired(now_ms) else None


def cluster_view(image: MetadataImage, active_holder: str | None, *, cluster_id: str) -> ClusterView:
    """The nodes and the active controller every node names (the module's first invariant). ``active_holder`` is the
    live lease holder (:func:`live_holder`), or the active controller's own holder name: it knows it holds the
    lease, and reads it from no store."""
    nodes = {
        b.broker_id: (b.endpoints[0].host, b.endpoints[0].port, b.rack)
        for b in image.brokers.values()
        if b.endpoints and not b.fenced
    }
    controllers: dict[int, tuple[str, int, str | None]] = {}
    active = NO_CONTROLLER
    holder = parse_holder(active_holder) if active_holder is not None else None
    if holder is not None:
        active, host, port = holder
        controllers[active] = (host, port, None)
    forwarding_broker = min(nodes, default=active)
    nodes.update(controllers)
    return ClusterView(
        cluster_id=cluster_id,
        nodes=MappingProxyType(nodes),
        controller_id=forwarding_broker,
        controllers=MappingProxyType(controllers),
        active_controller_id=active,
    )


def metadata(image: MetadataImage, body: m.MetadataRequest, version: int, view: ClusterView) -> m.MetadataResponse:
    """Every topic (a null list, or an empty one at v0) or the topics asked for, by name or (v10+) by id; an
    unknown one is answered with its error in its entry."""
    req = normalized("MetadataRequest", version, body)
    asked = req["topics"]
    topics: list[m.MetadataResponseTopic] = []
    if asked is None or (version == 0 and not asked):
        topics = [metadata_topic(t) for t in sorted(image.topics.values(), key=lambda t: t.name)]
    else:
        for entry in asked:
            topic_id, name = entry["topic_id"], entry["name"]
            try:
                if version >= 10 and not topic_id.is_zero:
                    topic = topic_for(image, topic_id=topic_id)
                else:
                    topic = topic_for(image, name=validate_topic_name(name or ""))
                topics.append(metadata_topic(topic))
            except KafkaError as exc:
                unnamed = "" if version < 12 else None
                named = name if name is not None else unnamed
                topics.append(m.MetadataResponseTopic(error_code=exc.code, name=named, topic_id=topic_id))
    response = m.MetadataResponse(
        brokers=metadata_brokers(view.nodes),
        cluster_id=view.cluster_id,
        controller_id=view.controller_id,
        topics=topics,
    )
    return normalized("MetadataResponse", version, response)


def describe_configs(image: MetadataImage, body: m.DescribeConfigsRequest, version: int) -> m.DescribeConfigsResponse:
    """Each topic's effective configs (set or default) and each broker's dynamic configs; an unknown topic, a
    malformed broker id or another resource type is that resource's error."""
    req = normalized("DescribeConfigsRequest", version, body)
    results: list[m.DescribeConfigsResult] = []
    for r in req["resources"]:
        rtype, rname, keys = r["resource_type"], r["resource_name"], r["configuration_keys"]
        result = m.DescribeConfigsResult(resource_type=rtype, resource_name=rname, configs=[])
        try:
            if rtype == ConfigResourceType.TOPIC:
                topic_for(image, name=rname)
                entries = [
                    topic_config_entry(d, value, explicit, req)
                    for d, value, explicit in effective(image.topic_configs(rname))
                    if keys is None or d.name in keys
                ]
            elif rtype == ConfigResourceType.BROKER:
                if rname and not rname.isdigit():
                    raise InvalidRequest(f"'{rname}' is not a broker id")
                values = image.configs.get((int(ConfigResourceType.BROKER), rname), {})
                entries = [
                    broker_config_entry(k, v, req) for k, v in sorted(values.items()) if keys is None or k in keys
                ]
            else:
                raise InvalidRequest(f"resource type {rtype} is not supported: use 2 (topic) or 4 (broker)")
            result.update({"error_code": 0, "error_message": None, "configs": entries})
        except KafkaError as exc:
            result.update({"error_code": exc.code, "error_message": exc.message})
        results.append(result)
    return normalized("DescribeConfigsResponse", version, m.DescribeConfigsResponse(results=results))


def describe_cluster(body: m.DescribeClusterRequest, version: int, view: ClusterView) -> m.DescribeClusterResponse:
    """The nodes of the asked endpoint type (see the module's invariants) and the active controller."""
    req = normalized("DescribeClusterRequest", version, body)
    endpoint_type = req["endpoint_type"]
    controller_id = view.active_controller_id if endpoint_type == ENDPOINT_CONTROLLERS else view.controller_id
    response = m.DescribeClusterResponse(
        endpoint_type=endpoint_type, cluster_id=view.cluster_id, controller_id=controller_id
    )
    if endpoint_type in (ENDPOINT_BROKERS, ENDPOINT_CONTROLLERS):
        listed = view.nodes if endpoint_type == ENDPOINT_BROKERS else view.controllers
        response["brokers"] = [
            m.DescribeClusterBroker(broker_id=node_id, host=host, port=port, rack=rack)
            for node_id, (host, port, rack) in sorted(listed.items())
        ]
    else:
        error = UnsupportedEndpointType(
            f"endpoint type {endpoint_type} is not one of {ENDPOINT_BROKERS} (brokers) or "
            f"{ENDPOINT_CONTROLLERS} (controllers)"
        )
        response.update({"error_code": error.code, "error_message": error.message})
    return normalized("DescribeClusterResponse", version, response)
