"""Kafka message schemas that kafka-python 3.0.12 lacks (the KIP-932 share-group APIs, the KIP-848
consumer-group APIs), as JSON in the shape of Kafka's own schema files, so kafka-python's schema
machinery generates the classes."""
