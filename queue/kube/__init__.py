"""Kubernetes edge of the controller: client, retries, watch caches, converters, actuator."""
