"""Contract of ``SlotJournal(...)``: the block size it files events under and the bounds of its memory.

A journal keeps, per block, the last ``per_block`` ownership events, for at most ``max_blocks`` blocks, and
the finishing step of at most ``max_finished`` requests: each bound must leave room for one entry.
"""

from kvcanary.constructors._settings import count, settings_contract

_BOUND_WHY = "A journal bounded to no entry keeps nothing: every violation would name no owner."
_BOUND_FIX = "Pass a positive count, or leave the default."

SlotJournalContract = settings_contract(
    "SlotJournal", "X", "Who held each KV block when: the ownership events a violation is attributed from.", {
        "block_size": count("Slots per block (the engine's page size; 1 for a token-major pool).",
                            why="Events are filed under slot // block_size; a size below 1 names no block.",
                            fix="Pass the engine's page size (1 for a token-major pool)."),
        "per_block": count("Events kept per block, newest last.", why=_BOUND_WHY, fix=_BOUND_FIX),
        "max_blocks": count("Blocks with events kept at most (the least recently changed go first).",
                            why=_BOUND_WHY, fix=_BOUND_FIX),
        "max_finished": count("Finished requests whose finishing step is kept at most.", why=_BOUND_WHY,
                              fix=_BOUND_FIX),
    })

check_slot_journal = SlotJournalContract.checker()
