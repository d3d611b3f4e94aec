"""DescribeCluster: the cluster as admin clients see it, one broker that is also the controller."""
from __future__ import annotations

from headwater.broker.security.acl_operations import CLUSTER_OPERATIONS, authorized_operations
from headwater.broker.security import connection
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES

DescribeClusterResponse = MESSAGE_CLASSES[ApiKey.DESCRIBE_CLUSTER][1]
BROKERS_ENDPOINT = 1  # endpoint_type (v1+): 1 brokers, 2 controllers


async def describe_cluster(broker, header, request):
    cfg = broker.config
    if header.api_version >= 1 and request.endpoint_type != BROKERS_ENDPOINT:
        return DescribeClusterResponse(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message="this broker answers for brokers only",
                                       endpoint_type=request.endpoint_type, cluster_id=broker.cluster_id,
                                       controller_id=-1, brokers=[], authorized_operations=None)
    host, port = connection.advertised(cfg)
    Broker = DescribeClusterResponse.DescribeClusterBroker
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=BROKERS_ENDPOINT,
        cluster_id=broker.cluster_id, controller_id=cfg.node_id,
        brokers=[Broker(broker_id=cfg.node_id, host=host, port=port, rack=None, is_fenced=False)],
        authorized_operations=authorized_operations(request.include_cluster_authorized_operations,
                                                    CLUSTER_OPERATIONS))
