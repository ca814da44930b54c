"""ComputeDomain controller: a drop-in replacement for the controller in NVIDIA's DRA driver."""
