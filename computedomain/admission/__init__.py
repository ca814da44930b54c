"""The placement webhook: a mutating admission webhook, served over TLS by the controller's process
when enabled, that gives each workload pod of an opted-in ComputeDomain a required node affinity
to the one NVLink clique decided for that domain (the decision: domain/placement.py)."""
