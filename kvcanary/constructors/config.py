"""Contract of ``CanaryConfig(...)``: the manager's settings, one entry each, with their rules.

Adding a setting is one entry in the table (and, for a rule between settings, one ``Relation`` below it).
"""

from kvcanary.constructors._settings import count, setting, settings_contract, validator
from kvcanary.consts import MAX_REAL_KV_SOURCES, CanaryMode, RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.manager.budget import VerifyBudget
from kvcanary_contracts import Relation

_STEPS_FIX = "Pass a positive number of steps (the default is 100)."

CanaryConfigContract = settings_contract(
    "CanaryConfig", "C", "The settings of one CanaryManager: what it checks and what it does with what it finds.", {
        "mode": setting(CanaryMode, "What the host does with violations: NONE (no manager), LOG or RAISE."),
        "real_kv_mode": setting(RealKvHashMode, "How much of layer 0's K/V bytes each record fingerprints."),
        "sweep_interval": count(
            "Steps between two sweeps of the prefix cache (0: no sweep).", minimum=0,
            why="It counts steps; a negative interval means nothing.", fix="Pass 0 to turn the sweep off."),
        "ring_capacity": count(
            "Rows of the device-side violation ring.",
            why="The ring keeps the first ring_capacity violations of a step; with no rows none could be reported.",
            fix="Use the default (1024) or any positive size."),
        "enable_v": setting(bool, "Whether the V-half endpoints run too (SGLang's default: K only)."),
        "enable_verify_token": setting(bool, "Whether verify compares each record's token with the expected one."),
        "enable_write_input_assert": setting(bool, "Whether write compares its inputs with the oracle's tokens."),
        "stats_every": count("Steps between two stats lines.", why="A line every 0 steps is no period.",
                             fix=_STEPS_FIX),
        "health_warmup_steps": count(
            "Steps before the kernel-run-counter watchdog starts.", minimum=0,
            why="It counts steps; a negative warm-up means nothing.", fix="Pass 0 to watch from the first step."),
        "health_every": count("Steps between two watchdog checks.", why="A check every 0 steps is no period.",
                              fix=_STEPS_FIX),
        "num_forward_slots": count(
            "Forwards per step that need plans of their own (one per captured draft step).",
            why="Every step runs at least one forward, which needs its own plans.",
            fix="Pass 1, or the number of draft steps a speculative engine captures."),
        "backend": setting(str, "A kvcanary backend forced for every launch (None: chosen per launch).",
                           optional=True),
        "verify_budget": setting(VerifyBudget, "At most that many verify entries per launch (None: all).",
                                 optional=True),
        "extensions": setting(Extensions, "The opt-in checks for every per-forward launch (None: none).",
                              optional=True),
        "layer_rotation": count(
            "Layer buffers fingerprinted per forward, in rotation over every layer (0: layer 0 only).", minimum=0,
            why="It counts layer buffers; a negative count means nothing.", fix="Pass 0 to turn the rotation off."),
        "compile": setting(bool, "Whether each forward's launches run as torch.compile graphs."),
        "graphs": setting(bool, "Whether HEAD and TAIL replay CUDA graphs the manager captures per batch bucket "
                                "(None: on for a CUDA pool unless compile is on).", optional=True),
        "on_violation": setting(
            ViolationPolicy, "The violation policy: log, raise or isolate (None: mode's).", optional=True,
            messages={"type": "{name} must be a ViolationPolicy or None, got {type}"}),
        "guard_history": count(
            "Decisions and failed requests each isolate-policy record keeps, the newest (None: every one).",
            optional=True,
            why="The records keep the newest guard_history entries; with room for none they would keep nothing, "
                "and monitoring already counts every decision and failure.",
            fix="Use the default (1024), any positive size, or None to keep every entry (tests, demos)."),
    },
    rules=(
        Relation(
            name="backend_named", require="len(backend) > 0", when="backend is not None",
            message="CanaryConfig.backend must be a backend name or None, got {backend!r}",
            why="An empty name names no backend; None is how to let kvcanary choose.",
            fix="Pass a registered backend's name (`kvcanary.registered_backends()`), or None.",
            breaks={"backend": "''"}),
        Relation(
            name="layer_rotation_at_most_sources", require="layer_rotation <= MAX_REAL_KV_SOURCES",
            message="CanaryConfig.layer_rotation folds at most {MAX_REAL_KV_SOURCES} layer buffers per forward "
                    "(the sources one launch takes), got {layer_rotation}",
            why="The rotated buffers are the real-KV sources of one launch, and a launch takes at most "
                "MAX_REAL_KV_SOURCES of them.",
            fix="Pass at most MAX_REAL_KV_SOURCES; the rotation still reaches every layer, over more forwards."),
        Relation(
            name="layer_rotation_needs_real_kv", require="layer_rotation == 0 or real_kv_mode.name != 'NONE'",
            over=("layer_rotation", "real_kv_mode"),
            message="CanaryConfig.layer_rotation needs real_kv_mode PARTIAL or ALL",
            why="The rotation chooses which layers' K/V bytes the records fingerprint; without a fingerprint "
                "there is nothing to rotate.",
            fix="Set real_kv_mode to PARTIAL or ALL, or layer_rotation to 0.",
            breaks={"real_kv_mode": RealKvHashMode.NONE}),
        Relation(
            name="on_violation_agrees_with_raise_mode",
            require="on_violation is None or mode.name != 'RAISE' or on_violation.name == 'RAISE'",
            over=("on_violation", "mode"),
            message="CanaryConfig.on_violation={on_violation.value} conflicts with mode=RAISE; leave mode at LOG "
                    "(the default) when on_violation is set",
            why="mode=RAISE already chooses the raise policy; another on_violation beside it says two different "
                "things, and kvcanary will not guess which one was meant.",
            fix="Leave mode at LOG (the default) and set on_violation alone, or drop on_violation.",
            breaks={"on_violation": ViolationPolicy.ISOLATE}),
        Relation(
            name="on_violation_needs_the_canary",
            require="on_violation is None or mode.name != 'NONE' or on_violation.name == 'LOG'",
            over=("on_violation", "mode"),
            message="CanaryConfig.on_violation={on_violation.value} conflicts with mode=NONE (the canary is off); "
                    "leave mode at LOG (the default) when on_violation is set",
            why="mode=NONE turns the canary off: the engine attaches no manager, so no violation is read back and "
                "no policy acts on one. A raise or isolate policy beside it promises a check that never runs.",
            fix="Leave mode at LOG (the default) and set on_violation alone, or drop on_violation to run without "
                "a canary.",
            breaks={"mode": CanaryMode.NONE, "on_violation": ViolationPolicy.ISOLATE}),
        Relation(
            name="graphs_or_compile", require="not (graphs is True and compile)", over=("graphs", "compile"),
            message="CanaryConfig.graphs=True conflicts with compile=True; choose one way to run the launches",
            why="Both replace the manager's eager HEAD and TAIL launches: the CUDA graphs replay them as "
                "captured, torch.compile runs them as compiled graphs; one forward cannot run both.",
            fix="Leave graphs at None (its default: off when compile is on), or set compile=False.",
            breaks={"graphs": True, "compile": True}),
    ),
    constants={"MAX_REAL_KV_SOURCES": MAX_REAL_KV_SOURCES},
)

validate_canary_config = validator(CanaryConfigContract)
