"""Security: SCRAM credentials, JAAS configuration, and (next) TLS contexts, principals and ACLs."""
