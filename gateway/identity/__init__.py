"""Who a caller is: bearer tokens from identity providers, API keys, and the principal."""
