"""``kubectl computedomain`` (alias ``kubectl cdom``): what an ML engineer or an SRE asks of the
cluster's ComputeDomains, answered from one LIST per kind."""
