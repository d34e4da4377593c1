"""The same as the installed command segnet-evaluate (segnet/commands.py says what it does)."""

from segnet.commands import segnet_evaluate

if __name__ == "__main__":
    segnet_evaluate()
