"""Tests of kvcanary's engine integrations."""
