"""One contract module per launcher (and per checked constructor), all in kvcanary's family."""
