"""Errors a user can fix by changing the configuration or the data; train.py and the scripts
print their message as one line instead of a traceback."""

import contextlib


class ConfigError(ValueError):
    """A configuration value is wrong or does not fit this machine; the message says what to use."""


class DatasetError(ValueError):
    """A dataset folder is missing or malformed; the message names the file and the problem."""


@contextlib.contextmanager
def user_errors_as_one_line():
    """What train.py and the scripts run their work in: a ConfigError or DatasetError ends the
    process with `error: <message>` instead of a traceback."""
    try:
        yield
    except (ConfigError, DatasetError) as error:
        raise SystemExit(f"error: {error}") from None
