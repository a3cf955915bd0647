"""The transports' whole-number knobs, read from the environment and checked."""

import os


def int_env(name, default, low):
    """The environment variable `name` as a whole number >= `low`, or
    `default` when unset: ValueError naming it otherwise."""
    text = os.environ.get(name, "")
    try:
        value = int(text) if text else default
    except ValueError:
        value = low - 1
    if value < low:
        raise ValueError(f"{name}={text!r}: must be a whole number >= {low}")
    return value
