"""kvcanary inside transformers' continuous batching: tiny seeded models on the CPU."""
