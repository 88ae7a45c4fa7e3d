"""The Kafka admin API as every node serves it: reads answered from a node's own image, writes forwarded to the
active controller, and the shaping of request and response bodies both sides share."""
