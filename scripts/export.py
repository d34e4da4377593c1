"""The same as the installed command segnet-export (segnet/commands.py says what it does)."""

from segnet.commands import segnet_export

if __name__ == "__main__":
    segnet_export()
