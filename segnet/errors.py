"""Errors a user can fix by changing the configuration or the data; train.py and the scripts
print their message as one line instead of a traceback."""


class ConfigError(ValueError):
    """A configuration value is wrong or does not fit this machine; the message says what to use."""


class DatasetError(ValueError):
    """A dataset folder is missing or malformed; the message names the file and the problem."""
