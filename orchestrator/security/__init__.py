"""Who is asking and what they may do: principals, SASL/SCRAM credentials, ACLs and the authorizer (pure cores)."""
