"""The contracts of kvcanary's checked constructors: ``RealKvSource``, ``ViolationLog.allocate``,
``CanaryConfig``, ``VerifyBudget``, ``CanaryCapacities`` and the pool specs. Each validates through the
contract framework, with stable codes and catalog pages, as the operations' launchers do (``kvcanary.ops``)."""
