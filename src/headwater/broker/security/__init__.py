"""Who may talk to the broker: listeners with their security protocol (TLS), SASL
authentication (PLAIN, SCRAM-SHA-256/512) and the credentials it checks. See docs/security.md."""
