"""Contracts of the settings given as strings: ``CanaryConfig.from_strings(mode=..., real_data=...)`` (SGLang's
``--kv-canary`` and ``--kv-canary-real-data``) and ``ViolationPolicy.parse(value, name=...)``.

An unknown value gets the ValueError text SGLang's server gives, word for word; the values are read from
the enums they name, so a value cannot be accepted here and missing there.
"""

from kvcanary.constructors._settings import setting, settings_contract
from kvcanary.consts import CanaryMode, RealKvHashMode
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary_contracts import Relation

SERVER_MODES = tuple(m.value for m in CanaryMode)
"""The ``--kv-canary`` values: none, log, raise."""
SERVER_REAL_DATA = tuple(m.name.lower() for m in RealKvHashMode)
"""The ``--kv-canary-real-data`` values: none, partial, all."""
POLICY_NAMES = tuple(p.value for p in ViolationPolicy)
"""The violation policies' names: log, raise, isolate."""

CanaryConfigFromStrings = settings_contract(
    "CanaryConfig.from_strings", "F", "Read SGLang's server strings (--kv-canary, --kv-canary-real-data).", {
        "mode": setting(str, "The --kv-canary value: none, log or raise (any case, surrounding spaces ignored)."),
        "real_data": setting(str, "The --kv-canary-real-data value: none, partial or all (any case)."),
    },
    rules=(
        Relation(
            name="mode_known", require="mode.strip().lower() in SERVER_MODES",
            message="kv_canary must be one of none/log/raise, got {mode!r}",
            why="--kv-canary names what the host does with violations; SGLang's server knows these three values "
                "and refuses any other with this very text.",
            fix="Pass none (no canary), log (the default) or raise.",
            breaks={"mode": "'loud'"}),
        Relation(
            name="real_data_known", require="real_data.strip().lower() in SERVER_REAL_DATA",
            message="kv_canary_real_data must be one of none/partial/all, got {real_data!r}",
            why="--kv-canary-real-data names how much of layer 0's K/V bytes each record fingerprints: none, the "
                "first 16 bytes (partial) or the whole strip (all).",
            fix="Pass none (the default), partial or all.",
            breaks={"real_data": "'some'"}),
    ),
    constants={"SERVER_MODES": SERVER_MODES, "SERVER_REAL_DATA": SERVER_REAL_DATA},
)

ViolationPolicyParse = settings_contract(
    "ViolationPolicy.parse", "F", "Read a violation policy by name (a server flag, a CLI option, a keyword).", {
        "value": setting(str, "log, raise or isolate (any case, surrounding spaces ignored), or a ViolationPolicy."),
        "name": setting(str, "The setting's name, for the message (on_violation unless told)."),
    },
    rules=(
        Relation(
            name="value_known", require="value.strip().lower() in POLICY_NAMES", over=("value",),
            values={"setting": "name"}, message="{setting} must be one of log/raise/isolate, got {value!r}",
            why="A violation policy is one of three: log it, raise, or isolate the requests that read the slot "
                "(docs/policies.md).",
            fix="Pass log, raise or isolate.",
            breaks={"value": "'drop'"}),
    ),
    constants={"POLICY_NAMES": POLICY_NAMES},
)

check_from_strings = CanaryConfigFromStrings.checker()
check_policy_name = ViolationPolicyParse.checker()
