"""Kafka's own wire protocol on a minikafka broker: ``protocol`` (the codec)."""
