"""Integrations of kvcanary into third-party serving engines, each an optional extra.

Nothing here is imported by ``import kvcanary``: an integration imports its engine, so it is loaded only
when the user asks for it (``import kvcanary.integrations.transformers``).
"""
