"""Kafka's names in the client-quota APIs (DescribeClientQuotas, AlterClientQuotas): the quota
keys and the entity type, shared by the broker's quotas and `headwater quotas` (which must not
import the broker's storage layer to name them)."""

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
CLIENT_ID = "client-id"  # the one entity type a broker without authentication can tell apart
