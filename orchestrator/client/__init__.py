"""High-level cluster operations over the Kafka protocol, shared by the CLI, the demo, the benches and the tests.

This face only re-exports (``X as X``): each name is defined in the module of its one job. Errors in answers are
raised as the typed Kafka error with the server's message, so callers never read error codes.
"""

from orchestrator.client.admin import TopicChange as TopicChange
from orchestrator.client.data_plane import FetchedRecord as FetchedRecord
from orchestrator.client.data_plane import PartitionOffsets as PartitionOffsets
from orchestrator.client.data_plane import PartitionRecord as PartitionRecord
from orchestrator.client.security import ACL_VERSIONS as ACL_VERSIONS
from orchestrator.client.security import SCRAM_MECHANISMS as SCRAM_MECHANISMS
from orchestrator.client.security import SCRAM_SALT_BYTES as SCRAM_SALT_BYTES
from orchestrator.client.security import ScramUser as ScramUser
from orchestrator.client.security import acl_creation as acl_creation
from orchestrator.client.security import bindings_from_describe as bindings_from_describe
from orchestrator.client.security import delete_acls_filter as delete_acls_filter
from orchestrator.client.security import describe_acls_request as describe_acls_request
from orchestrator.client.security import scram_deletion_request as scram_deletion_request
from orchestrator.client.security import scram_upsertion_request as scram_upsertion_request
from orchestrator.client.tiered_client import TieredClient as TieredClient
from orchestrator.client.views import BrokerProgressView as BrokerProgressView
from orchestrator.client.views import RemoteDeletionStatus as RemoteDeletionStatus
from orchestrator.client.views import TieringStatus as TieringStatus
