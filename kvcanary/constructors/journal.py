"""Contract of ``SlotJournal(...)``: the block size it files events under and the bounds of its memory.

A journal keeps its newest events in a ring of ``capacity`` (once full, it folds its oldest eighth, at most 16,384
events, at a time into each block's state: it holds between ``capacity`` less that and ``capacity``), at most
``per_block`` of them per block read back as history, block ids below ``max_blocks``, the finishing step of at most
``max_finished`` requests: each bound leaves room for one entry; the ring is a power of two of at least 16 events.
"""

from kvcanary.constructors._settings import count, settings_contract
from kvcanary_contracts import Relation

_BOUND_WHY = "A journal bounded to no entry keeps nothing: every violation would name no owner."
_BOUND_FIX = "Pass a positive count, or leave the default."

SlotJournalContract = settings_contract(
    "SlotJournal", "X", "Who held each KV block when: the ownership events a violation is attributed from.", {
        "block_size": count("Slots per block (the engine's page size; 1 for a token-major pool).",
                            why="Events are filed under slot // block_size; a size below 1 names no block.",
                            fix="Pass the engine's page size (1 for a token-major pool)."),
        "per_block": count("Events of a block its history returns at most, newest last.", why=_BOUND_WHY,
                           fix=_BOUND_FIX),
        "max_blocks": count("Block ids are below this (the pool's block count: a larger id is an error at the "
                            "recording call).", why="Block ids index the journal's per-block arrays; a bound below "
                            "1 admits no block.", fix="Pass the pool's block count (slots // block_size + 1)."),
        "max_finished": count("Finished requests whose finishing step is kept at most.", why=_BOUND_WHY,
                              fix=_BOUND_FIX),
        "capacity": count("Events the ring holds at most, newest last (a power of two, at least 16); once full "
                          "it folds its oldest eighth (at most 16,384 events) at a time into each block's "
                          "state (its holders and quarantine flag).", minimum=16, breaks=8,
                          why="The ring folds its oldest eighth at a time: below 16 events it would fold on "
                          "nearly every event, and a window of steps is exact only while the ring holds it.",
                          fix="Pass a power of two of at least 16, or leave the default (1 << 20)."),
    },
    rules=(
        Relation(
            name="capacity_power_of_two", require="capacity & (capacity - 1) == 0",
            message="SlotJournal.capacity must be a power of two, got {capacity}",
            why="The ring's index is the event's number masked with capacity - 1, which needs a power of two.",
            fix="Pass a power of two (1 << 20 is the default).",
            breaks={"capacity": "(1 << 20) + 16"}),
    ))

check_slot_journal = SlotJournalContract.checker()
