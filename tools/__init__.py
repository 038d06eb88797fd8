"""Development tooling: run from a checkout, imported by tests and docs generation, never by the product."""
