"""A schema registry with the Confluent Schema Registry's REST API (``http/schema_registry``):
``registry`` the subjects, versions and ids as a state machine over ``store`` (the compacted
``_schemas`` topic); ``compatibility`` parses schemas and judges their evolution."""
