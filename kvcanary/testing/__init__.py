"""The conformance kit for a backend's test-suite, as ``torch.testing`` is torch's: call builders
(:mod:`.builders`, :mod:`.calls`), parity against torch_ref (:mod:`.parity`) and ``torch.library.opcheck``
over kvcanary's operators (:mod:`.opcheck`).

kvcanary's own random parity scenarios, benchmark workloads and the compiled-step world are development
tooling of the repository (``tools/``), as is the golden-vector loader (``tests/golden/loader.py``).
"""
