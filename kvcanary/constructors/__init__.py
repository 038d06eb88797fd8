"""The contracts of kvcanary's checked constructors and settings: ``RealKvSource``, ``ViolationLog.allocate``,
``CanaryConfig`` (and its server strings, with ``ViolationPolicy.parse``), ``VerifyBudget``,
``CanaryCapacities``, the pool specs, the per-forward inputs (``CanaryBatch``, ``ExpectedTokens``,
``SweepEntries``) and the evidence settings. Each validates through the contract framework, with stable codes
and catalog pages, as the operations' launchers do (``kvcanary.ops``)."""
