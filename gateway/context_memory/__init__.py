"""Context memory: what of a message is embedded, the embedders, the indexer."""
