"""``computewise tune``: the fastest training configuration in a few short trials, and what it saves."""
