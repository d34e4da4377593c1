"""The same as the installed command segnet-plan (segnet/commands.py says what it does)."""

from segnet.commands import segnet_plan

if __name__ == "__main__":
    segnet_plan()
