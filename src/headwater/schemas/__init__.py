"""Schema parsing and compatibility checks for the schema registry: Avro, Protobuf and JSON Schema."""
