"""Contract of ``VerifyBudget(...)``: how many verify entries one launch may check, and how many per request."""

from kvcanary.constructors._settings import count, settings_contract, validator

VerifyBudgetContract = settings_contract(
    "VerifyBudget", "C", "A verification budget: at most max_entries verify entries per launch.", {
        "max_entries": count(
            "Verify entries one launch checks at most (the budget's size).",
            why="A budget of no entries would verify nothing, and every corruption would go unseen.",
            fix="Pass a positive count; leave `verify_budget=None` to verify every live entry instead."),
        "newest_per_request": count(
            "The newest entries of each request verified every step (the tokens attention has just begun to "
            "read, and the write chain's seed).", minimum=0,
            why="It counts entries; a negative count means nothing.",
            fix="Pass 0 or more (the default, 2, keeps the seed and its predecessor)."),
    })

validate_verify_budget = validator(VerifyBudgetContract)
