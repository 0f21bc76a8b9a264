"""Kafka record schemas (message-spec JSON) and table schemas, shipped as package data."""
