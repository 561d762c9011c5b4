"""`gangq demo`: the reference scenario played end to end on embedded parts.

The demo wires an embedded PostgreSQL, the cluster emulator, the controller and the REST API,
plays `examples/reference/`, and judges the run only from what it observes through Kubernetes
watches and the REST API. It must not reach into the controller's memory or the store's tables
to decide whether the story held.
"""
